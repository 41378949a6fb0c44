import pytest

from toolformer.tools import ToolError, calculate


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("18 + 12 * 3", "54"),
        ("10-2-3", "5"),
        ("8/4/2", "1"),
        ("723 / 252", "2.87"),
        ("658,893 / 11.4", "57797.63"),
        ("2 x 3", "6"),
        ("2 × 3.5", "7"),
        ("-(4 - 10)", "6"),
        ("1.005 + 0", "1.01"),  # half up, exact decimals (a float would give 1.0)
        ("0.1 + 0.2", "0.3"),
        ("1,000,000 - 1", "999999"),
        ("7 ÷ 2", "3.5"),
        ("5 − 7", "-2"),
        ("-0.001", "0"),
        (" 12 ", "12"),
    ],
)
def test_values(expr, expected):
    assert calculate(expr) == expected


@pytest.mark.parametrize(
    "expr, code",
    [
        ("1/0", "division_by_zero"),
        ("__import__('os').system('id')", "not_arithmetic"),
        ("2 ** 10", "not_arithmetic"),
        ("abs(3)", "not_arithmetic"),
        ("a + 1", "not_arithmetic"),
        ("", "empty"),
        ("1 +", "syntax"),
        ("1" * 300, "too_long"),
        ("99999999 * 99999999", "too_large"),
        ("7 // 2", "not_arithmetic"),
    ],
)
def test_errors(expr, code):
    with pytest.raises(ToolError) as e:
        calculate(expr)
    assert e.value.code == code
