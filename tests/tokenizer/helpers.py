"""Shared helpers for the tokenizer tests."""
import json
import os

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def load_golden(name: str) -> dict:
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return json.load(f)
