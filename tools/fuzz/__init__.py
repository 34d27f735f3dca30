"""A differential fuzzer for ember: ``python -m tools.fuzz --help``.

gen (+ stmts, shapes): seed -> random program; run: eager vs ``ember.compile`` on the same inputs;
compare: classify differences; minimize: delta debugging; repro: standalone reproducer files;
driver: worker processes with deadlines; __main__: the CLI and its summary.
"""
