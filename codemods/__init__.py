"""gradfix's codemods, one rule per file; :data:`ALL_RULES` lists them in code order.

A rule is found by being here: every module of this package is imported and each
:class:`~gradfix.rule.Rule` subclass it defines with its own ``code`` is registered (a
new rule file needs no line anywhere else). Two rules with one code are an error.
"""

from __future__ import annotations

import importlib
import pkgutil

from gradfix.rule import Rule


def _discovered() -> list[type[Rule]]:
    found: dict[str, type[Rule]] = {}
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        for value in vars(module).values():
            is_rule = isinstance(value, type) and issubclass(value, Rule)
            if is_rule and value.__module__ == module.__name__ and "code" in vars(value):
                if value.code in found:
                    raise ImportError(
                        f"two rules with code {value.code}: "
                        f"{found[value.code].__qualname__} and {value.__qualname__}"
                    )
                found[value.code] = value
    return [found[code] for code in sorted(found)]


ALL_RULES = _discovered()

__all__ = ["ALL_RULES"]
