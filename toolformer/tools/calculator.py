"""Calculator: +, −, ×, ÷ over decimals, parsed with ``ast`` (never ``eval``).

It reads only what it can read exactly: ASCII and full-width digits, the signs people write for the four
operations (``x`` only as a word of its own) and brackets. Anything else (``5²``, ``0x10``, ``2x3``, ``١٢٣``,
``½``) is refused with a ``not_arithmetic`` error naming the character, never folded into other digits.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

from toolformer.tools.base import Tool, ToolError

MAX_INPUT_CHARS = 200  # longer inputs are not arithmetic anyone writes in prose
HINT = "numbers with + - * / and brackets, e.g. [Calculator(400 / 1400)]"
MAX_MAGNITUDE = Fraction(10) ** 15  # larger intermediate values are refused
MAX_NODES = 200  # bound on the size of the expression tree

_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_LONE_X = re.compile(r"(?<! )[xX]|[xX](?! )")  # an `x` that is not a word of its own

# The characters read, each as the ASCII it stands for: digits, signs as people write them (`x` only between
# spaces, checked apart) and their full-width forms. Anything else is refused, never folded into a digit: NFKC
# would read `5²` as 52 and `₃` as 3.
_READ = {c: c for c in "0123456789.,+-*/()xX"}
_READ |= {chr(0xFF10 + i): str(i) for i in range(10)} | {chr(ord(c) + 0xFEE0): c for c in "+-*/().,"}
_READ |= dict.fromkeys("×·∗", "*") | dict.fromkeys("÷∕", "/") | dict.fromkeys("−–—", "-")

# The input grammar (Tool.input_pattern): signs and opening brackets, a number (thousands separators and decimals
# allowed), closing brackets, and the same again after each operator, with the signs `_normalise` reads (`x` between
# spaces).
_NUMBER_PATTERN = r"(?:[0-9]+(?:,[0-9]{3})*(?:\.[0-9]*)?|\.[0-9]+)"
_TERM_PATTERN = rf"(?:[-+−–—(] *)*{_NUMBER_PATTERN}(?: *\))*"
INPUT_PATTERN = rf" *{_TERM_PATTERN}(?:(?: *[-+*/×·∗÷∕−–—] *| +[xX] +){_TERM_PATTERN})* *"

_OPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
}


def _unread(ch: str) -> ToolError:
    """The refusal of a character the calculator does not read, named by its Unicode name."""
    name = f"{ch!r} ({unicodedata.name(ch, f'U+{ord(ch):04X}')})"
    if unicodedata.numeric(ch, None) is not None:  # a superscript, a fraction, another script's digit ...
        return ToolError("not_arithmetic", f"{name} is not a digit the calculator reads: only 0-9, no powers, "
                                           "fractions or other scripts' digits", HINT)
    return ToolError("not_arithmetic", f"{name} is not allowed: only digits, '.', '+', '-', '*', '/', '(' and ')'",
                     HINT)


def _normalise(text: str) -> str:
    """``text`` in ASCII arithmetic (``*`` and ``/`` for the signs people write, no thousands separators); a
    character it does not read, or an ``x`` glued to a number (``0x10``, ``2x3``), is refused."""
    chars = []
    for ch in text:
        if ch.isspace():
            chars.append(" ")
        elif ch in _READ:
            chars.append(_READ[ch])
        else:
            raise _unread(ch)
    text = "".join(chars).strip()
    if _LONE_X.search(text):
        raise ToolError("not_arithmetic", "'x' multiplies only as a word of its own, between spaces (2 x 3): "
                                          "0x10 is not read as hex, nor 2x3 as a product", HINT)
    return _THOUSANDS.sub("", text).replace("x", "*").replace("X", "*")


def _evaluate(node: ast.AST, text: str) -> Fraction:
    """The exact value of the expression ``node`` parsed from ``text`` (numbers read as written there)."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, text)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        segment = ast.get_source_segment(text, node)
        assert segment is not None  # the node was parsed from text
        v = Fraction(Decimal(segment))  # a float would round 17+ digits
        if abs(v) > MAX_MAGNITUDE:
            raise ToolError("too_large", f"number exceeds {float(MAX_MAGNITUDE):.0e}")
        return v
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _evaluate(node.operand, text)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in (*_OPS, ast.Div):
        a, b = _evaluate(node.left, text), _evaluate(node.right, text)
        if isinstance(node.op, ast.Div):
            if b == 0:
                raise ToolError("division_by_zero", "division by zero")
            v = a / b
        else:
            v = _OPS[type(node.op)](a, b)
        if abs(v) > MAX_MAGNITUDE:
            raise ToolError("too_large", f"result exceeds {float(MAX_MAGNITUDE):.0e}")
        return v
    raise ToolError("not_arithmetic", f"only + - * / on numbers are allowed, not {type(node).__name__}", HINT)


def format_number(value: Fraction) -> str:
    """Round to 2 decimals (half up) and print without trailing zeros."""
    d = (Decimal(value.numerator) / Decimal(value.denominator)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    text = f"{d:f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def calculate(expression: str, max_chars: int = MAX_INPUT_CHARS) -> str:
    """Evaluate an arithmetic expression; raise :class:`ToolError` otherwise.

    >>> calculate("18 + 12 * 3"), calculate("10-2-3"), calculate("723 / 252")
    ('54', '5', '2.87')
    """
    if len(expression) > max_chars:
        raise ToolError("too_long", f"input longer than {max_chars} characters",
                        f"at most {max_chars} characters: the arithmetic only, without words")
    text = _normalise(expression)
    if not text:
        raise ToolError("empty", "empty expression", HINT)
    if "," in text:
        raise ToolError("not_arithmetic", "',' separates thousands only (1,250 or 1,000,000), not decimals", HINT)
    if "**" in text or "//" in text:
        raise ToolError("not_arithmetic", "only + - * / are allowed", HINT)
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ToolError("syntax", f"cannot parse {expression!r} as arithmetic", HINT) from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise ToolError("too_long", "expression too large")
    try:
        return format_number(_evaluate(tree, text))
    except RecursionError:
        raise ToolError("too_long", "expression nested too deeply") from None


class Calculator(Tool):
    name = "Calculator"
    description = (
        "Computes the result of an arithmetic expression with +, -, *, / over whole "
        "and decimal numbers (thousands separators, '×' and 'x' between spaces accepted), evaluated "
        "left to right with the usual precedence, rounded to two decimals."
    )
    input_description = "an arithmetic expression, e.g. 400 / 1400"
    example = "400 / 1400"
    input_pattern = INPUT_PATTERN
    prompt = (
        "Your task is to add calls to a Calculator API to a piece of text. A call "
        "computes a number the text needs. Write a call as \"[Calculator(expression)]\", "
        "where \"expression\" uses +, -, * and /, right before the number it computes. "
        "Examples:\n"
        "Input: The farm sold 340 eggs on Monday and 275 on Tuesday, 615 eggs in all.\n"
        "Output: The farm sold 340 eggs on Monday and 275 on Tuesday, [Calculator(340 + 275)] 615 eggs in all.\n"
        "Input: A ticket costs 12.50 dollars, so four tickets cost 50 dollars.\n"
        "Output: A ticket costs 12.50 dollars, so four tickets cost [Calculator(12.50 * 4)] 50 dollars.\n"
        "Input: Of the 1,200 seats, 900 were taken, which leaves 300 empty.\n"
        "Output: Of the 1,200 seats, 900 were taken, which leaves [Calculator(1200 - 900)] 300 empty.\n"
        "Input: The bridge opened in 1968 and closed in 2015, after 47 years of service.\n"
        "Output: The bridge opened in 1968 and closed in 2015, after [Calculator(2015 - 1968)] 47 years of service.\n"
        "Input: The 96 pupils were split into 8 groups of 12.\n"
        "Output: The 96 pupils were split into 8 groups of [Calculator(96 / 8)] 12.\n"
        "Input: {text}\n"
        "Output:"
    )

    def __init__(self, max_input_chars: int = MAX_INPUT_CHARS):
        self.max_input_chars = max_input_chars

    def run(self, tool_input: str, date: str | None = None) -> str:
        return calculate(tool_input, self.max_input_chars)
