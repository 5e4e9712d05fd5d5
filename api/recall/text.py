"""The words of a recall query: content words, how much of them an item covers, its snippet.

A content word is a word (letters, digits, underscore; lower-cased) of two or more
characters that is not an English function word (:data:`STOPWORDS`, a short fixed
list: the full-text lanes search content words only, so "what do we know about the
flood?" searches ``flood`` — and a question about a subject not in memory does not
match every item through "the" or "what"). Coverage compares words by a shared
prefix of up to five characters (``flooded`` covers ``flood``), a crude, documented
stand-in for stemming used only to judge how well the best hit matches.
"""

from __future__ import annotations

import re

from store.memory.model import MemoryItem

__all__ = ["STOPWORDS", "content_words", "coverage", "item_words", "snippet"]

STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "him",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "know",
        "knew",
        "me",
        "more",
        "most",
        "my",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "anything",
        "something",
        "tell",
        "told",
        "happened",
        "happen",
        "recall",
        "remember",
        "memory",
        "memories",
        "please",
        "near",
    ]
)
"""English function words (and recall's own verbs) left out of the words searched."""

_WORD = re.compile(r"\w+")
_PREFIX = 5


def content_words(text: str) -> list[str]:
    """The query's content words, in order, once each."""
    words = (w.lower() for w in _WORD.findall(text))
    return list(dict.fromkeys(w for w in words if len(w) >= 2 and w not in STOPWORDS))


def item_words(item: MemoryItem) -> set[str]:
    """The words of an item's searchable text (title, statement, details, tags, place)."""
    text = " ".join(
        [
            item.title,
            item.statement,
            item.details or "",
            " ".join(item.tags),
            item.anchor.place or "",
        ]
    )
    return {w.lower() for w in _WORD.findall(text)}


def coverage(words: list[str], found: set[str]) -> float:
    """The share of ``words`` present in ``found`` (by a shared prefix); 1.0 when no words."""
    if not words:
        return 1.0
    prefixes = {w[:_PREFIX] for w in found}
    hit = sum(1 for w in words if w in found or w[:_PREFIX] in prefixes)
    return hit / len(words)


def snippet(item: MemoryItem, words: list[str], width: int = 160) -> str:
    """Up to ``width`` characters of the statement around the first query word it holds."""
    text = item.statement
    low = text.lower()
    starts = [i for i in (low.find(w[:_PREFIX]) for w in words) if i >= 0]
    start = max(0, min(starts) - width // 4) if starts else 0
    piece = text[start : start + width]
    return ("..." if start else "") + piece + ("..." if start + width < len(text) else "")
