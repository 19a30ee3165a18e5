"""Tests written from `make mutate` (docs/mutation.md): each kills a mutant the other tests let
live in the privacy core."""

from __future__ import annotations
