"""What a fix declares about itself, handed to the oracle (which never reads the rules).

A rule's class data says what its fix may change besides the bug (see
:class:`gradfix.rule.BaseRule`): ``fix_restores_gradient`` (a cut gradient must come back,
so the weights torch made are checked for a lost gradient too), ``fix_changes_training``
(the optimizer may now step leaves it never stepped: judged by a replay that holds them),
``fix_drops_leaves`` (leaves the original made may no longer require grad),
``fix_differentiates_gradients`` (finite differences follow ``autograd.grad``'s results
instead of holding them constant). The caller
turns a fix's rule codes into a :class:`FixIntent` (:func:`gradfix.registry.fix_intent`);
a change made by hand (``verify --baseline``) has no declared intent:
:meth:`FixIntent.unknown` allows what a fix may legitimately change (it may make other
leaves train or stop making throw-away leaves; whether it differentiates a gradient is
read from the change, :meth:`FixIntent.for_change`, as is whether it adds a gradient
reset) and demands no restored gradient.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class FixIntent:
    codes: tuple[str, ...] = ()
    restores_gradient: bool = False
    changes_training: bool = False
    drops_leaves: bool = False
    differentiates_gradients: bool = False
    #: autograd error messages (a stable part of each) the fix is meant to make go away:
    #: where the very same error persists at the same statement, the fix failed
    repairs: tuple[str, ...] = ()
    #: False: a refactor made by hand, whose intent is unknown
    declared: bool = True
    #: the change adds a reset of gradients (``zero_grad()``, ``.grad = None``): it means
    #: each step to read fresh gradients, so a step on a stale one is its failure even
    #: where the original stepped on stale ones too
    adds_gradient_reset: bool = False
    #: an out-of-place tensor op whose result the original discarded (``sim.masked_fill(
    #: mask, -inf)`` as a statement: a no-op), which the change now uses: the forward
    #: changes on purpose where that value enters (its text, or empty)
    uses_discarded: str = ""
    #: a stop-gradient the change adds (``.detach()``, ``.data``, ``no_grad``, a
    #: ``requires_grad_(False)``): "line N: `code`" of the first, or empty. Where before's
    #: gradient is the true derivative of its forward, after's differs from it on purpose
    #: (a TD target, a GAN's fake, a frozen reference) or by mistake: intent, not evidence
    adds_stop_gradient: str = ""

    @classmethod
    def unknown(cls) -> FixIntent:
        return cls(changes_training=True, drops_leaves=True, declared=False)

    def for_change(self, before_src: str, after_src: str) -> FixIntent:
        """An unknown intent made precise by the change itself: a change that asks for
        the graph of a gradient where the original did not (``create_graph=True``) means
        its gradients to be differentiated (MAML's second order); otherwise they stay the
        constants autograd makes of them, as the program wrote it (first-order MAML)."""
        if self.declared:
            return self
        added = after_src.count("create_graph=True") > before_src.count("create_graph=True")
        resets = _resets(after_src) > _resets(before_src)
        return replace(
            self,
            differentiates_gradients=added,
            adds_gradient_reset=resets,
            uses_discarded=_discarded_result_used(before_src, after_src),
            adds_stop_gradient=_added_stop_gradient(before_src, after_src),
        )


#: the spellings of a gradient reset
_RESETS = ("zero_grad(", ".grad = None", ".grad.zero_()")


def _spelled(line: str, spellings: tuple[str, ...]) -> int:
    """How many of ``spellings`` a line's code spells (its comment left out)."""
    code = line.split("#", 1)[0]
    return sum(code.count(spelling) for spelling in spellings)


def _resets(source: str) -> int:
    """How many gradient resets a source spells (comments left out)."""
    return sum(_spelled(line, _RESETS) for line in source.splitlines())


#: the spellings of a stop-gradient: a value read past autograd, or a block or leaf it skips
#: (whole names: ``keep_requires_grad=False`` or ``loader.dataset`` spell none)
_STOP_GRADIENTS = re.compile(
    r"\.detach_?\("
    r"|\.data(?!\w)"
    r"|(?<!\w)(?:no_grad|inference_mode)\("
    r"|(?<!\w)requires_grad_\(\s*False\s*\)"
    r"|(?<!\w)requires_grad\s*=\s*False"
)


def _stop_gradients(line: str) -> int:
    return len(_STOP_GRADIENTS.findall(line.split("#", 1)[0]))


def _added_stop_gradient(before_src: str, after_src: str) -> str:
    """The first line the change adds or rewrites that spells more stop-gradients than
    the lines it replaces, as "line N: `code`"; empty when the change spells no more in
    all (a detach moved, or kept in a rewritten line, adds none)."""
    import difflib

    if sum(map(_stop_gradients, after_src.splitlines())) <= sum(
        map(_stop_gradients, before_src.splitlines())
    ):
        return ""
    old, new = before_src.splitlines(), after_src.splitlines()
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        removed = sum(map(_stop_gradients, old[i1:i2]))
        for j in range(j1, j2):
            if _stop_gradients(new[j]) > removed:
                return f"line {j + 1}: `{new[j].strip()}`"
            removed -= min(removed, _stop_gradients(new[j]))
    return ""


#: a fix that declares nothing beyond the bug
NO_INTENT = FixIntent()


def _discarded_result_used(before_src: str, after_src: str) -> str:
    """The text of a call the original makes as a bare statement although it returns a
    new tensor and changes nothing (an op with an in-place twin: ``masked_fill``,
    ``clamp``), which the change assigns or returns instead; empty when there is none."""
    import ast

    from gradfix.torch_facts import inplace_twin

    def discarded(tree: ast.AST) -> set[str]:
        found: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                func = node.value.func
                if isinstance(func, ast.Attribute) and inplace_twin(func.attr):
                    found.add(ast.unparse(node.value))
        return found

    def used(tree: ast.AST) -> set[str]:
        found: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return)):
                value = node.value
                if value is not None:
                    found.update(ast.unparse(n) for n in ast.walk(value) if isinstance(n, ast.Call))
        return found

    try:
        before, after = ast.parse(before_src), ast.parse(after_src)
    except SyntaxError:
        return ""
    now_used = sorted((discarded(before) - discarded(after)) & used(after))
    return now_used[0] if now_used else ""
