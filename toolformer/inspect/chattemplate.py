"""The chat template of a ``trl-sft`` export (``chat_template.jinja`` in its folder), chosen for the run's model.

A base model tuned by this project has no chat turns of its own: it writes text with its calls inline
(``e(c, r)`` in the run's call style, the separator after each). The template renders a conversation of the
export as exactly that text: every assistant ``content`` as it is, each ``tool_calls`` entry as the call's
opening ``[Tool(input) →`` and the ``tool`` message after it as `` result]`` and the separator, the user turn as
nothing, so ``apply_chat_template(messages, tools=tools)`` gives the row's text of the built data set after a
header listing the tools offered (one JSON object a line, :data:`HEADER` above them). The input is written back
from the arguments as the paper's tools and MCP tools with one string argument write it (the one string value;
``{}`` as nothing; any other object as JSON). Assistant text sits in ``{% generation %}`` blocks, so TRL's
``assistant_only_loss`` can leave the header and the results out of the loss.

Pass the file to TRL as ``SFTConfig(chat_template_path=FOLDER/chat_template.jinja)``. A model with a tool-aware
template of its own (Qwen, Llama 3) writes calls its own way instead; use that one only to train that way.
"""

from __future__ import annotations

import json
from pathlib import Path

from toolformer.tools.calls import CallStyle

TEMPLATE_FILE = "chat_template.jinja"
HEADER = "Tools you may call:"


def chat_template(style: CallStyle, separator: str) -> str:
    """The Jinja chat template that writes a conversation as the run's inline text (see the module doc)."""
    start, arrow = json.dumps(style.start), json.dumps(style.arrow)
    after = json.dumps(f"{style.end}{separator}")
    return (
        f"{{#- toolformer export trl-sft: calls inline in the {style.name} call style -#}}\n"
        "{%- if tools -%}\n"
        f"{{{{- {json.dumps(HEADER)} -}}}}\n"
        "{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}\n"
        "{{- '\\n\\n' -}}\n"
        "{%- endif -%}\n"
        "{%- for message in messages -%}\n"
        "{%- if message.role == 'assistant' -%}\n"
        "{%- generation -%}{{- message.content or '' -}}\n"
        "{%- for call in message.tool_calls or [] -%}\n"
        "{%- set args = call.function.arguments -%}\n"
        f"{{{{- {start} + (call.function.name | replace('__', '.')) + '(' -}}}}\n"
        "{%- if args is mapping -%}\n"
        "{%- if args | length == 1 and (args | dictsort | first)[1] is string -%}"
        "{{- (args | dictsort | first)[1] -}}\n"
        "{%- elif args | length -%}{{- args | tojson -}}{%- endif -%}\n"
        "{%- else -%}{{- args -}}{%- endif -%}\n"
        f"{{{{- ') ' + {arrow} -}}}}\n"
        "{%- endfor -%}{%- endgeneration -%}\n"
        "{%- elif message.role == 'tool' -%}\n"
        f"{{{{- ' ' + message.content + {after} -}}}}\n"
        "{%- endif -%}\n"
        "{%- endfor -%}\n"
    )


def header_tokens(template: str, catalogue: list[dict], tokenizer_path: str) -> int | None:
    """Tokens the tools' header takes in every row, with the tokenizer of ``tokenizer_path`` (None when it is not
    a local folder: nothing is fetched to count)."""
    if not catalogue or not tokenizer_path or not Path(tokenizer_path).expanduser().is_dir():
        return None
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_path)
    tools: list = list(catalogue)  # transformers types the list as dicts or callables
    ids = tok.apply_chat_template([{"role": "user", "content": ""}], tools=tools, chat_template=template,
                                  tokenize=True, return_dict=False)
    return len(ids)
