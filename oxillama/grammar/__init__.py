"""Grammar-constrained decoding: GBNF grammars, JSON Schema, and a token matcher over a vocabulary.

``Grammar.from_string`` / ``from_file`` / ``from_json_schema`` / ``json()`` build a grammar;
``GrammarMatcher(grammar, vocab_bytes, eog_ids)`` follows it token by token and masks logits.
"""
from oxillama.errors import GrammarError
from oxillama.grammar.gbnf import MAX_ELEMENTS, MAX_NESTING, MAX_REPETITION
from oxillama.grammar.grammar import Grammar, grammar_from_response_format
from oxillama.grammar.json_schema import json_schema_to_gbnf
from oxillama.grammar.matcher import GrammarMatcher

__all__ = ["Grammar", "GrammarMatcher", "GrammarError", "json_schema_to_gbnf", "grammar_from_response_format",
           "MAX_REPETITION", "MAX_NESTING", "MAX_ELEMENTS"]
