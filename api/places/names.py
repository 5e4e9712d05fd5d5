"""Place-name normalisation and validation of place text."""

from __future__ import annotations

import re
import unicodedata

from api.errors import InvalidArgument

__all__ = ["MAX_TEXT_CHARS", "check_text", "letters", "normalise_name"]

MAX_TEXT_CHARS = 200
"""Longest accepted place text, after stripping surrounding whitespace."""

_JOINERS = frozenset("\u200c\u200d")  # zero-width (non-)joiners are part of Persian/Indic names
_ASCII_SEPARATORS = re.compile(r"[^a-z0-9]+")
_CODE_LIKE = re.compile(r"[;<>{}\[\]=|$`\\*^~@#%]|--|\.\.|://|^\s*/")


def normalise_name(text: str) -> str:
    """Normalise a name for lookup.

    NFKD, combining marks removed, casefold, every character that is not a
    letter or digit becomes a space, runs of spaces collapse.

    Args:
        text: Any text.

    Returns:
        The key, e.g. ``"sao paulo"`` for ``"São Paulo"``.
    """
    if text.isascii():
        return " ".join(_ASCII_SEPARATORS.sub(" ", text.lower()).split())
    folded = unicodedata.normalize("NFKD", text).translate(_CHAR_CLASSES).casefold()
    # casefold can compose new characters ("ß" -> "ss" is fine, others may not be):
    # run the table again so marks and separators never survive.
    return " ".join(folded.translate(_CHAR_CLASSES).split())


class _CharClasses(dict[int, int | str]):
    """``str.translate`` table, filled lazily: marks removed, non letters/digits to space."""

    def __missing__(self, codepoint: int) -> int | str:
        cat = unicodedata.category(chr(codepoint))
        value: int | str = "" if cat[0] == "M" else (codepoint if cat[0] in "LN" else " ")
        self[codepoint] = value
        return value


_CHAR_CLASSES = _CharClasses()


def letters(text: str) -> int:
    """Count the letters (alphabetic characters) of a text.

    Args:
        text: Any text.

    Returns:
        How many of its characters are letters.
    """
    return sum(1 for ch in text if ch.isalpha())


def check_text(text: object) -> str | None:
    """Validate place text; return a not-found reason for non-place text, None when fine.

    Args:
        text: What the caller passed as place text.

    Returns:
        Why the text names no place (looks like code or a path, fewer than two
        letters), or None when it may be a place name.

    Raises:
        InvalidArgument: Non-string, empty, over-long text or control characters.
    """
    if not isinstance(text, str):
        raise InvalidArgument(
            f"place text must be a string, got {type(text).__name__}", code="invalid_place_text"
        )
    if len(text) > 4 * MAX_TEXT_CHARS or len(text.strip()) > MAX_TEXT_CHARS:
        raise InvalidArgument(
            f"place text is longer than {MAX_TEXT_CHARS} characters", code="invalid_place_text"
        )
    stripped = text.strip()
    if not stripped:
        raise InvalidArgument("place text is empty", code="invalid_place_text")
    if any(
        unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn") and ch not in _JOINERS
        for ch in stripped
    ):
        raise InvalidArgument(
            "place text contains control or unassigned characters", code="invalid_place_text"
        )
    if _CODE_LIKE.search(stripped):
        return "text looks like code or a path, not a place name"
    if letters(stripped) < 2:
        return "text has fewer than two letters"
    return None
