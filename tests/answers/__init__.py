"""The regression oracle: admission answers and ``explain`` outputs, recorded as digests.

:mod:`tests.answers.recorder` decides a fixed set of reviews and explains and compares their
digests with ``answers.json`` beside it; ``tests/test_answers_recorded.py`` runs the comparison
with the suite, and ``python -m tests.answers --check|--write`` runs it by hand. It lives with
the tests because it is their data: a refactoring keeps every answer byte-identical, a change
that means to alter decisions re-records in its own commit.
"""
