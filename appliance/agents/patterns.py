"""The local screening vocabulary: what the gateway uses instead of a model for short messages.

A message under five words costs more to send to a model than to read here, and is too short to
carry a subtle attack: a short injection is a known phrase ("ignore previous instructions", "show
your system prompt", "developer mode", chat-template tokens). Each pattern has a verdict: DISCARD
for unambiguous override, extraction or abuse attempts, SUSPICIOUS for openers that are often
harmless ("act as a pirate", "no rules for pets?", "I'm the owner's neighbour") but are how
injections begin. Text is normalised first
(NFKC, zero-width characters removed, lower case, whitespace collapsed) so look-alike spellings
match.

Intent, language and complexity of a short message are guessed from a few word lists; a short
message is always ``simple``.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

SHORT_WORDS = 5  # messages with fewer words skip the model

_ZERO_WIDTH = re.compile("[\u200b-\u200f\u2060\ufeff]")
_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)?", re.UNICODE)


@dataclass(frozen=True)
class Pattern:
    """One entry of the vocabulary."""

    name: str
    regex: re.Pattern[str]
    verdict: str  # DISCARD or SUSPICIOUS
    injection: bool = True


def _p(name: str, pattern: str, verdict: str = "DISCARD", injection: bool = True) -> Pattern:
    return Pattern(name, re.compile(pattern), verdict, injection)


_RULES = r"(?:instructions?|rules|prompts?|directions|guidelines|directives|programming|context)"
_EARLIER = r"(?:previous|prior|above|earlier|preceding|old|original|initial|system)"

PATTERNS: tuple[Pattern, ...] = (
    _p(
        "override",
        rf"\b(?:ignore|disregard|forget|skip|drop|override|bypass)\b(?:\s+\w+){{0,3}}\s+"
        rf"(?:{_EARLIER}\s+)?{_RULES}\b",
    ),
    _p("override-all", r"\b(?:ignore|disregard|forget)\s+(?:all|everything)\b"),
    _p(
        "prompt-extraction",
        r"\b(?:reveal|show|print|repeat|output|display|dump|leak|tell me|give me|paste|"
        r"what(?:'s| is| are))"
        r"\b(?:\s+\w+){0,3}\s+(?:system\s+(?:prompt|message)|initial\s+prompt|hidden\s+"
        r"(?:prompt|instructions?)|your\s+(?:prompt|instructions|rules|configuration))",
    ),
    _p("system-prompt", r"\bsystem\s*prompt\b"),
    _p("above-text", r"\b(?:repeat|print|output)\b(?:\s+\w+){0,3}\s+(?:above|before this)\b"),
    _p(
        "jailbreak",
        r"\b(?:jailbreak\w*|dan mode|do anything now|developer mode|dev mode|god mode)\b",
    ),
    # Ambiguous: "No rules for pets?" and "I'm the owner's neighbour" are ordinary visitors.
    _p(
        "unrestricted",
        r"\b(?:no|without any|without)\s+(?:restrictions|filters|limits|rules|censorship)\b",
        "SUSPICIOUS",
    ),
    _p(
        "admin-claim",
        r"\b(?:i am|i'm)\s+(?:your|the)\s+(?:admin|administrator|developer|owner|creator)\b",
        "SUSPICIOUS",
    ),
    _p(
        "mode-switch",
        r"\b(?:enable|enter|activate|switch to)\s+"
        r"(?:admin|debug|root|sudo|maintenance)\s*mode\b",
    ),
    _p("sudo", r"^\s*sudo\b"),
    _p(
        "template-token",
        r"<\|[a-z_]+\|>|\[/?inst\]|\[/?system\]|</?system>|^\s*(?:system|assistant)\s*:"
        r"|###\s*(?:system|instruction)",
    ),
    _p("new-instructions", rf"\bnew\s+{_RULES}\s*:"),
    _p(
        "override-de",
        r"\b(?:ignoriere|vergiss|missachte)\b(?:\s+\w+){0,3}\s+(?:anweisungen|regeln|vorgaben)\b",
    ),
    _p(
        "override-fr",
        r"\b(?:ignore[sz]?|oublie[sz]?)\b(?:\s+\w+){0,3}\s+(?:instructions|consignes|règles)\b",
    ),
    _p(
        "override-es",
        r"\b(?:ignora|olvida)\b(?:\s+\w+){0,3}\s+(?:instrucciones|reglas)\b",
    ),
    _p(
        "role-reset",
        r"\b(?:you are now|from now on,? you (?:are|will)|you're now)\b",
        "SUSPICIOUS",
    ),
    _p(
        "role-play",
        r"\b(?:pretend (?:to be|you are|you're)|act as|roleplay as|role-play as)\b",
        "SUSPICIOUS",
    ),
    _p(
        "abuse",
        r"\b(?:fuck (?:you|off)|kill yourself|kys|stupid (?:bot|ai)|shut up)\b",
        injection=False,
    ),
    _p(
        "spam",
        r"\b(?:viagra|casino|crypto giveaway|free bitcoin|earn \$?\d+ (?:a|per) day|click here|"
        r"bit\.ly/|onlyfans)\b",
        injection=False,
    ),
)

GREETINGS = {
    "en": {"hi", "hello", "hey", "morning", "evening", "thanks", "thank", "cheers", "bye"},
    "de": {"hallo", "moin", "servus", "danke", "tschüss", "guten"},
    "fr": {"bonjour", "salut", "merci", "bonsoir", "coucou"},
    "es": {"hola", "gracias", "buenos", "buenas", "adiós"},
    "it": {"ciao", "grazie", "buongiorno", "buonasera"},
    "nl": {"hoi", "dank", "goedemorgen", "doei"},
}
LANGUAGE_WORDS = {
    "de": {"ich", "und", "ist", "nicht", "wie", "was", "wo", "wann", "der", "die", "das", "du"},
    "fr": {"je", "est", "les", "vous", "pas", "comment", "quoi", "où", "quand", "le", "la"},
    "es": {"que", "es", "los", "cómo", "dónde", "cuándo", "por", "el", "la", "tienes"},
    "it": {"che", "è", "non", "come", "dove", "quando", "il", "sono"},
    "nl": {"ik", "het", "een", "niet", "hoe", "wat", "waar", "wanneer", "jij"},
}
QUESTION_WORDS = {
    "what",
    "why",
    "how",
    "when",
    "where",
    "who",
    "which",
    "can",
    "could",
    "do",
    "does",
    "is",
    "are",
    "will",
    "would",
    "should",
    "wie",
    "was",
    "wo",
    "wann",
    "warum",
    "comment",
    "pourquoi",
    "où",
    "quand",
    "qué",
    "cómo",
    "dónde",
    "cuándo",
}
COMPLAINT_WORDS = {
    "broken",
    "wrong",
    "terrible",
    "awful",
    "useless",
    "disappointed",
    "refund",
    "worst",
}
FOLLOW_UP = {"and", "also", "more", "why", "else", "again", "continue", "then", "ok", "okay"}


def normalise(text: str) -> str:
    """Fold look-alikes, drop zero-width characters, lower-case, collapse whitespace."""
    folded = unicodedata.normalize("NFKC", text)
    return _SPACE.sub(" ", _ZERO_WIDTH.sub("", folded)).strip().lower()


def words(text: str) -> list[str]:
    """The words of ``text`` (letters and digits; apostrophes inside a word kept)."""
    return _WORD.findall(text)


def is_short(text: str) -> bool:
    """True when the message skips the model."""
    return len(words(text)) < SHORT_WORDS


def match(text: str) -> Pattern | None:
    """The first pattern ``text`` matches (DISCARD patterns before SUSPICIOUS ones)."""
    norm = normalise(text)
    hits = [p for p in PATTERNS if p.regex.search(norm)]
    hits.sort(key=lambda p: p.verdict != "DISCARD")
    return hits[0] if hits else None


def guess_language(text: str) -> str:
    """An ISO 639-1 guess from greeting and function words; English when nothing says otherwise."""
    found = set(words(normalise(text)))
    best, score = "en", 0
    for lang in ("de", "fr", "es", "it", "nl"):
        count = len(found & (GREETINGS[lang] | LANGUAGE_WORDS[lang]))
        if count > score:
            best, score = lang, count
    return best


def guess_intent(text: str) -> str:
    """question, instruction, complaint, greeting or follow-up, from the words alone."""
    norm = normalise(text)
    found = words(norm)
    if not found:
        return "follow-up"
    if found[0] in set().union(*GREETINGS.values()):
        return "greeting"
    if set(found) & COMPLAINT_WORDS:
        return "complaint"
    if norm.endswith("?") or found[0] in QUESTION_WORDS:
        return "follow-up" if found[0] in FOLLOW_UP else "question"
    if found[0] in FOLLOW_UP:
        return "follow-up"
    return "instruction"
