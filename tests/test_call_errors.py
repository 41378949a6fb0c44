"""python -m toolformer.smallworld.lab.call_errors: a greedy call's operands, each by how it is wrong."""


import pytest

PROMPT = "Rosa sent 4723 cups and Tom sent 8,738 cups on 12 carts. How many cups in all? The answer is"


@pytest.fixture(scope="module")
def call_errors():
    from toolformer.smallworld.lab import call_errors

    return call_errors


@pytest.mark.parametrize("written, kind", [
    ("4723 + 8738", "exact"),
    ("4,723 + 8738", "exact"),
    ("8738 + 4723", "operands right, operation or order wrong"),
    ("4723 * 8738", "operands right, operation or order wrong"),
    ("8738 + 8738", "wrong: an operand missing"),
    ("6723 + 8738", "wrong: first digit"),
    ("4723 + 8538", "wrong: one later digit"),
    ("4723 + 1238", "wrong: many digits"),
    ("723 + 8738", "wrong: length"),
    ("4723 + 12", "wrong: other prompt number"),
    ("6723 + 873", "wrong: first digit+length"),
])
def test_classify(call_errors, written, kind):
    assert call_errors.classify(written, "4723 + 8738", PROMPT) == kind


def test_svamp_items(call_errors, tmp_path):
    path = tmp_path / "set.json"
    path.write_text('[{"Body": "Tom had 6305 stamps.", "Question": "How many now?", "Equation": "( 6305 + 3471 )",'
                    ' "Answer": 9776, "Form": "f1"}]', encoding="utf-8")
    (item,) = call_errors.svamp_items(str(path), 10)
    assert item == {"prompt": "Tom had 6305 stamps. How many now? The answer is", "argument": "6305 + 3471",
                    "form": "f1"}
    path.write_text('[{"Body": "x", "Question": "y", "Equation": "( ( 1 + 2 ) * 3 )"}]', encoding="utf-8")
    with pytest.raises(SystemExit, match="item 0: needs Body, Question and a one-step Equation"):
        call_errors.svamp_items(str(path), 10)
