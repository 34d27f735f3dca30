"""The Python-semantics program table: every program of the ``programs_*`` modules, grouped by feature.

``TABLE`` is a list of ``program_table.Program`` (function, group, argument sets, globals it writes). The
modules only hold plain functions: no torch, no numpy, no syntax newer than CPython 3.11.
"""
import programs_basic
import programs_calls
import programs_control
import programs_effects
import programs_errors
import programs_generators
import programs_groups
import programs_guards
import programs_objects
import programs_opcode_errors
import programs_patterns

GROUP_MODULES = (programs_basic, programs_control, programs_calls, programs_objects, programs_errors,
                 programs_guards, programs_generators, programs_effects, programs_patterns,
                 programs_opcode_errors, programs_groups)

TABLE = [p for mod in GROUP_MODULES for p in mod.T.programs]

_names = [p.name for p in TABLE]
_dupes = sorted({n for n in _names if _names.count(n) > 1})
if _dupes:
    raise RuntimeError(f"duplicate program names: {_dupes}")
if len({p.fn.__code__ for p in TABLE}) != len(TABLE):
    raise RuntimeError("two table entries share one function")
