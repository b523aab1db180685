"""The rule API: what a codemod is and how it reports.

A codemod decides on Python's ``ast`` and only *reports* findings (Fixit, TorchFix). It
never edits files: a finding may carry a :class:`FixPlan`, whose edits (LibCST node
replacements, :class:`Fix`) are built only when the file is fixed or previewed, and the
engine applies them.

    class LeafInplace(NoGradBlockRule):
        code = "GF201"
        name = "leaf-inplace"
        message = "In-place operation on a leaf tensor that requires grad"
        fix_safety = FixSafety.SAFE  # the fixes' safety, unless a fix says otherwise
        fix_availability = FixAvailability.SOMETIMES  # a leaf used in the graph before: no fix

        def visit_Call(self, node: ast.Call) -> None:
            ...
            self.report(node, fix=self.plan(build, "Wrap in `torch.no_grad()`"))

See CONTRIBUTING.md for a rule end to end.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import functools
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, ClassVar, Union

import libcst as cst

from gradfix.fileio.text import source_lines

if TYPE_CHECKING:
    from libcst.metadata import CodeRange

    from gradfix.edits import Editor
    from gradfix.semantic import Semantic


class FixSafety(str, enum.Enum):
    """Whether a fix may be applied without the user asking for unsafe fixes."""

    SAFE = "safe"
    UNSAFE = "unsafe"


class FixAvailability(str, enum.Enum):
    """Whether a rule's findings come with a fix (ruff's ``FixAvailability``).

    ``always``: every finding has one (unless the fix would delete a comment it cannot
    move); ``sometimes``: some findings are only reported; ``never``: none has one."""

    NEVER = "never"
    SOMETIMES = "sometimes"
    ALWAYS = "always"


Replacement = Union["cst.CSTNode", "cst.RemovalSentinel", "cst.FlattenSentinel"]


@dataclass(frozen=True)
class Edit:
    """Replace ``target`` (a node of the parsed module) by ``replacement``."""

    target: cst.CSTNode
    replacement: Replacement


@dataclass(frozen=True, eq=False)
class Fix:
    """One logical rewrite: all its edits are applied together or not at all.

    Several findings may share one ``Fix`` object (e.g. consecutive statements wrapped in
    a single ``with torch.no_grad():`` block); the engine applies it once.
    """

    edits: tuple[Edit, ...]
    safety: FixSafety
    description: str
    imports: tuple[str, ...] = ()  # modules the fixed code needs, e.g. ("torch",)
    #: the ``with`` blocks it creates merge with an adjacent ``with`` of the same header
    #: (``torch.no_grad()``), made by the user, another fix or an earlier pass
    joinable: bool = False


#: builds a planned fix's edits on the LibCST tree; None (or LookupError) when it cannot
Builder = Callable[["Editor"], "Sequence[Edit] | None"]


@dataclass(frozen=True, eq=False)
class FixPlan:
    """A fix decided on ``ast`` (:class:`Rule`), built with LibCST only when the file
    has to be fixed or previewed (:meth:`gradfix.edits.Editor.realise`). Several findings
    may share one plan (consecutive updates wrapped in one block): it is built once."""

    build: Builder
    description: str
    safety: FixSafety
    imports: tuple[str, ...] = ()
    joinable: bool = False


@dataclass(frozen=True)
class Report:
    """What a rule reports: the engine turns it into a public :class:`Finding`.

    ``node`` is a LibCST node (:class:`Rule`) or an ``ast`` node (:class:`Rule`, whose
    ``fix`` is a :class:`FixPlan` until the engine builds it)."""

    rule: type[BaseRule]
    node: cst.CSTNode | ast.AST
    position: CodeRange
    message: str
    fix: Fix | FixPlan | None


@dataclass(frozen=True)
class FixSummary:
    safety: str
    description: str


@functools.total_ordering
@dataclass(frozen=True)
class Finding:
    """A finding in plain data (picklable, JSON-ready). Lines and columns are 1-based.

    In a notebook, ``cell`` is the cell's number (1-based) and the lines count from the
    cell's first line; findings sort by cell, then line, column and code."""

    line: int
    col: int
    code: str
    name: str = field(compare=False)
    message: str = field(compare=False)
    end_line: int = field(compare=False)
    end_col: int = field(compare=False)
    fix: FixSummary | None = field(compare=False, default=None)
    cell: int | None = None

    def sort_key(self) -> tuple[int, int, int, str]:
        return (self.cell or 0, self.line, self.col, self.code)

    def __lt__(self, other: Finding) -> bool:
        return self.sort_key() < other.sort_key()

    def location(self, path: str) -> str:
        """``path:line:col``; ``nb.ipynb:cell 3:line 2:col 5`` in a notebook."""
        if self.cell is None:
            return f"{path}:{self.line}:{self.col}"
        return f"{path}:cell {self.cell}:line {self.line}:col {self.col}"

    def to_dict(self, path: str) -> dict[str, object]:
        data: dict[str, object] = {
            "code": self.code,
            "name": self.name,
            "message": self.message,
            "path": path,
        }
        if self.cell is not None:  # the JSON of a .py file stays as it was
            data["cell"] = self.cell
        return {
            **data,
            "line": self.line,
            "col": self.col,
            "end_line": self.end_line,
            "end_col": self.end_col,
            "fix": None
            if self.fix is None
            else {"safety": self.fix.safety, "description": self.fix.description},
        }


@dataclass(frozen=True)
class Valid:
    """Code the rule must not report. Dedented before use."""

    code: str


@dataclass(frozen=True)
class Invalid:
    """Code the rule must report, and what its findings offer: either ``expected_fix``,
    the source after all fixes, or ``report_only=True``, no fix at all (every finding of
    the rule in ``code`` has ``fix=None``). Dedented before use."""

    code: str
    expected_fix: str | None = None
    report_only: bool = False

    def __post_init__(self) -> None:
        if self.report_only and self.expected_fix is not None:
            raise ValueError("a report-only example has no expected fix")


class BaseRule:
    """What every rule declares (class data) and says about itself (docs, fix label)."""

    code: ClassVar[str]
    name: ClassVar[str]
    message: ClassVar[str]
    #: what the rule finds and fixes in one sentence (at most 160 characters): the summary
    #: of ``gradfix rules``; the docstring's "What it does" gives the details
    synopsis: ClassVar[str] = ""
    #: the safety of the fixes :meth:`fix` builds unless a fix says otherwise
    fix_safety: ClassVar[FixSafety]
    fix_availability: ClassVar[FixAvailability] = FixAvailability.ALWAYS
    #: every safety its fixes can have, when some fixes override ``fix_safety`` (e.g.
    #: ``(SAFE, UNSAFE)``); empty: all are ``fix_safety``. Checked against ``INVALID``.
    fix_safeties: ClassVar[tuple[FixSafety, ...]] = ()
    default_enabled: ClassVar[bool] = True
    #: the fix must give a gradient back to a leaf or weight the original cut off (GF101's
    #: ``torch.stack``): the verifier then checks torch-made weights left without gradient
    #: by finite differences too. False: the fix keeps the gradients as they were (a
    #: frozen teacher stays frozen), or the original raised.
    fix_restores_gradient: ClassVar[bool] = False
    #: the fix makes the optimizer train leaves it did not train before (GF109 registers a
    #: tensor as an ``nn.Parameter``): the verifier then replays the fix with those leaves
    #: held at their values across each optimizer step, and that replay must keep every
    #: forward result and gradient. False: the trajectory must stay the same as it is.
    fix_changes_training: ClassVar[bool] = False

    #: a fix may create leaves without ``requires_grad`` that a run showed are never trained
    #: (GF401's labels made once from such weights): the verifier then matches the fixed
    #: program's leaves to the original's by line, shape and dtype and leaves the dropped
    #: ones uncompared. False: both versions must create the same leaves.
    fix_drops_leaves: ClassVar[bool] = False
    #: the fix makes ``autograd.grad`` record its gradients' graph (GF406's
    #: ``create_graph=True``): finite differences then follow the inner gradients instead
    #: of holding them constant, as autograd without ``create_graph`` does.
    fix_differentiates_gradients: ClassVar[bool] = False
    VALID: ClassVar[Sequence[Valid]] = ()
    INVALID: ClassVar[Sequence[Invalid]] = ()
    #: What a run of the program proved at lines of this file (``gradfix trace``): line ->
    #: the kinds of runtime findings there (``"inplace-saved"``: the tensor changed in place
    #: on this line was saved for backward). A rule may take them where its static analysis
    #: cannot prove the same; every fix is then proven by running the program again. Empty
    #: for a static check; :mod:`gradfix.trace.link` makes subclasses that know them.
    runtime: ClassVar[Mapping[int, frozenset[str]]] = MappingProxyType({})

    @classmethod
    def proven_at_run(cls, line: int, *kinds: str) -> bool:
        """Whether a run proved one of ``kinds`` at ``line``."""
        return any(kind in cls.runtime.get(line, ()) for kind in kinds)

    @classmethod
    def summary(cls) -> str:
        """One sentence: :attr:`synopsis` (a rule without one: :meth:`description`)."""
        return cls.synopsis or cls.description()

    @classmethod
    def description(cls) -> str:
        """The first paragraph of the docstring's "What it does" section, on one line."""
        return docs_section(cls, "What it does").split("\n\n")[0].replace("\n", " ").strip()

    @classmethod
    def offered_safeties(cls) -> tuple[FixSafety, ...]:
        """The safeties of the fixes this rule offers, safe first (none: no fix)."""
        if cls.fix_availability is FixAvailability.NEVER:
            return ()
        offered = set(cls.fix_safeties or (cls.fix_safety,))
        return tuple(safety for safety in FixSafety if safety in offered)

    @classmethod
    def riskiest_safety(cls) -> FixSafety | None:
        """``unsafe`` when any of its fixes may be unsafe; None when it never fixes."""
        safeties = cls.offered_safeties()
        return safeties[-1] if safeties else None

    @classmethod
    def fix_label(cls) -> str:
        """What the rule offers, as ``gradfix rules`` shows it: ``safe`` or ``unsafe`` (every
        finding gets a fix of that safety), ``safe/unsafe`` (the safety depends on the
        finding), with ``sometimes`` in front when some findings are only reported
        (``sometimes safe/unsafe``), or ``none``."""
        safeties = "/".join(safety.value for safety in cls.offered_safeties())
        if not safeties:
            return "none"
        if cls.fix_availability is FixAvailability.SOMETIMES:
            return f"sometimes {safeties}"
        return safeties

    @classmethod
    def fix_sentence(cls) -> str:
        """The label in words, for ``gradfix explain``."""
        safeties = " or ".join(safety.value for safety in cls.offered_safeties())
        if not safeties:
            return "No fix: the findings are only reported."
        if len(cls.offered_safeties()) > 1:
            safeties += ", depending on the finding"
        if cls.fix_availability is FixAvailability.ALWAYS:
            return f"Every finding gets a fix ({safeties})."
        return f"Some findings get a fix ({safeties}); the others are only reported."

    @classmethod
    def docs(cls) -> str:
        return textwrap.dedent(cls.__doc__ or "").strip()


@dataclass
class RuleContext:
    """What an :class:`Rule` sees of one file: its text and the analysis of its ``ast``."""

    path: str
    source: str
    semantic: Semantic

    @functools.cached_property
    def lines(self) -> list[str]:
        """The source's lines, split when a rule first asks (at its first report: most
        files have none)."""
        return source_lines(self.source)


class Rule(BaseRule):
    """A rule that decides on Python's ``ast`` and fixes with LibCST only when asked.

    Its ``visit_<AstType>`` / ``leave_<AstType>`` methods (``visit_Call(self, node:
    ast.Call)``) are called in one batched walk over the file's ``ast``
    (:func:`gradfix.walk.walk_ast_batched`); ``self.analysis`` is the file's
    :class:`gradfix.semantic.Semantic`. A finding with a fix carries a :class:`FixPlan`
    (:meth:`plan`): its description and safety now, its edits built later from the
    LibCST tree by an :class:`gradfix.edits.Editor`::

        def visit_Call(self, node: ast.Call) -> None:
            if self.analysis.call_name(node) == "torch.tensor" and ...:
                def build(editor: Editor) -> list[Edit]:
                    call = editor.node(node)
                    return [editor.add_argument(call, "requires_grad", "True")]
                self.report(node, fix=self.plan(build, "Add `requires_grad=True`"))
    """

    #: The last names of the functions whose calls ``visit_Call`` handles: ``"where"`` for
    #: ``torch.where``, ``"backward"`` for ``loss.backward()``. The walk then hands it only
    #: the calls spelled ``<anything>.where(...)`` or ``where(...)``, or with a name an
    #: import binds to one of them (``from torch import where as w``). None: every call
    #: (a rule that reads calls of any name, or run evidence at any call). A rule whose
    #: calls no fixed set names (``*_``, or names the file decides) may define an instance
    #: method ``takes_call(spelled, aliased) -> bool`` instead (or besides): the walk asks
    #: it once per spelling and file (``spelled`` ``""`` for a callee that is no name;
    #: ``aliased``, the last parts an import binds that name to) and hands it only the
    #: calls it answers True for.
    calls: ClassVar[frozenset[str] | None] = None

    #: The types of the one target of the assignments ``visit_Assign`` handles:
    #: ``{ast.Subscript}`` for a rule about ``x[i] = v``, ``{ast.Name}`` for one about
    #: ``x = f(x)``. The walk then hands it only those, and the assignments to several
    #: targets (``a = b = v``). None: every assignment.
    assign_targets: ClassVar[frozenset[type[ast.expr]] | None] = None

    #: Words one of which a file must spell for this rule to find anything there without a
    #: run's evidence: the identifiers every finding's shape contains (``{"grad"}`` for a
    #: rule about reads of ``x.grad``; an import alias spells the name it imports). The
    #: engine looks for them in the whole text, comments and strings included, and does
    #: not run the rule on a file that spells none of them (most files of a codebase run
    #: no backward pass). None: every file. A rule whose only handler is ``visit_Call``
    #: with a :attr:`calls` set needs no words: the walk already hands it nothing else.
    needs: ClassVar[frozenset[str] | None] = None

    @classmethod
    def needed_words(cls) -> frozenset[str] | None:
        """:attr:`needs`, with the last part of each name whose canonical form ends in
        one of them (imported under its own name: ``torch.functional.F`` is
        ``torch.nn.functional``). None: every file."""
        if cls not in _NEEDED_WORDS:
            _NEEDED_WORDS[cls] = _needed_words(cls.needs)
        return _NEEDED_WORDS[cls]

    def __init__(self, context: RuleContext) -> None:
        self.context = context
        self.analysis = context.semantic
        self.reports: list[Report] = []

    def report(
        self, node: ast.AST, message: str | None = None, *, fix: FixPlan | None = None
    ) -> None:
        from gradfix.edits import ast_range  # edits imports this module

        position = ast_range(node, self.context.lines)
        self.reports.append(Report(type(self), node, position, message or self.message, fix))

    def plan(
        self,
        build: Builder,
        description: str,
        *,
        safety: FixSafety | None = None,
        imports: Sequence[str] = (),
        joinable: bool = False,
    ) -> FixPlan:
        """A fix with this rule's default safety unless ``safety`` overrides it."""
        return FixPlan(build, description, safety or self.fix_safety, tuple(imports), joinable)

    def plan_replace(
        self,
        target: ast.AST,
        replacement: Callable[[Editor, cst.CSTNode], Replacement | None],
        description: str,
        *,
        safety: FixSafety | None = None,
    ) -> FixPlan:
        """A one-edit fix: the LibCST node of ``target`` replaced by what ``replacement``
        builds from it (None: no fix); adds ``import torch`` when the file has no alias."""

        def build(editor: Editor) -> list[Edit] | None:
            node = editor.node(target)
            new = replacement(editor, node)
            return None if new is None else [Edit(node, new)]

        imports = () if self.analysis.torch_alias() else ("torch",)
        return self.plan(build, description, safety=safety, imports=imports)


_NEEDED_WORDS: dict[type[Rule], frozenset[str] | None] = {}


def _needed_words(words: frozenset[str] | None) -> frozenset[str] | None:
    from gradfix.torch_facts import canonical_spellings

    if words is None:
        return None
    return words | canonical_spellings(words.__contains__)


def rules_for_source(rules: Sequence[type[Rule]], source: str) -> list[type[Rule]]:
    """``rules`` without those that cannot find anything in ``source``: it spells none of
    their :meth:`Rule.needed_words`. A rule told what a run proved
    (:attr:`BaseRule.runtime`) always runs."""
    spelled: dict[str, bool] = {}
    kept = []
    for rule in rules:
        words = None if rule.runtime else rule.needed_words()
        if words is not None and not any(
            spelled[word] if word in spelled else spelled.setdefault(word, _spells(source, word))
            for word in words
        ):
            continue
        kept.append(rule)
    return kept


def _spells(source: str, word: str) -> bool:
    """``word`` occurs in ``source`` as a whole word (``grad`` is not spelled by
    ``requires_grad``): a search of the text per occurrence, not a regular expression
    tried at every position (three to four times slower on transformers)."""
    size = len(word)
    start = source.find(word)
    while start >= 0:
        end = start + size
        before = source[start - 1] if start else " "
        after = source[end] if end < len(source) else " "
        if not (before.isalnum() or before == "_" or after.isalnum() or after == "_"):
            return True
        start = source.find(word, start + 1)
    return False


def missing_comments(fix: Fix) -> list[str]:
    """The comments of the nodes ``fix`` replaces that its replacements lack, in order (a
    rule that rebuilds an expression from its parts drops the comments inside it)."""
    kept: Counter[str] = Counter()
    for edit in fix.edits:
        replacement = edit.replacement
        nodes = replacement.nodes if isinstance(replacement, cst.FlattenSentinel) else [replacement]
        for node in nodes:
            if isinstance(node, cst.CSTNode):
                kept.update(_comments(node))
    missing = []
    for edit in fix.edits:
        for text in _comments(edit.target):
            if kept[text]:
                kept[text] -= 1
            else:
                missing.append(text)
    return missing


def keeping_comments(fix: Fix) -> Fix | None:
    """``fix`` with the comments it would delete moved into its first replacement that can
    hold them: after a call's opening parenthesis, inside parentheses around another
    expression, above a statement. None when no replacement can (a removal)::

        torch.sqrt(                               torch.linalg.vector_norm(  # per row
            (x ** 2).sum(1)  # per row    ->          x, dim=1)
        )
    """
    missing = missing_comments(fix)
    if not missing:
        return fix
    for index, edit in enumerate(fix.edits):
        carried = _carry(edit.replacement, missing)
        if carried is not None:
            edits = (*fix.edits[:index], Edit(edit.target, carried), *fix.edits[index + 1 :])
            return dataclasses.replace(fix, edits=edits)
    return None


def _carry(node: Replacement, texts: list[str]) -> Replacement | None:
    if isinstance(node, cst.FlattenSentinel):
        for index, inner in enumerate(node.nodes):
            carried = _carry(inner, texts)
            if carried is not None:
                nodes = [*node.nodes[:index], carried, *node.nodes[index + 1 :]]
                return cst.FlattenSentinel(nodes)  # type: ignore[arg-type]
        return None
    lines = [cst.EmptyLine(comment=cst.Comment(text)) for text in texts]
    if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
        return node.with_changes(leading_lines=[*node.leading_lines, *lines])
    if isinstance(node, cst.Call) and node.args:
        return node.with_changes(whitespace_before_args=_open(node.whitespace_before_args, texts))
    if isinstance(node, cst.BaseExpression):
        if not node.lpar:
            return node.with_changes(
                lpar=[cst.LeftParen(whitespace_after=_open(cst.SimpleWhitespace(""), texts))],
                rpar=[cst.RightParen()],
            )
        first = node.lpar[0]
        opened = first.with_changes(whitespace_after=_open(first.whitespace_after, texts))
        return node.with_changes(lpar=[opened, *node.lpar[1:]])
    return None


def _open(
    whitespace: cst.BaseParenthesizableWhitespace, texts: list[str]
) -> cst.ParenthesizedWhitespace:
    """The whitespace after an opening parenthesis, with ``texts`` as comments: the first
    at the end of the line, the others on lines of their own."""
    lines = [
        cst.EmptyLine(whitespace=cst.SimpleWhitespace("    "), comment=cst.Comment(text))
        for text in texts
    ]
    if isinstance(whitespace, cst.ParenthesizedWhitespace):
        return whitespace.with_changes(empty_lines=[*whitespace.empty_lines, *lines])
    return cst.ParenthesizedWhitespace(
        first_line=cst.TrailingWhitespace(cst.SimpleWhitespace("  "), cst.Comment(texts[0])),
        empty_lines=lines[1:],
        indent=True,
        last_line=cst.SimpleWhitespace("    "),
    )


def _comments(node: cst.CSTNode) -> list[str]:
    found: list[str] = []

    class _Comments(cst.CSTVisitor):
        def visit_Comment(self, comment: cst.Comment) -> None:
            found.append(comment.value)

    node.visit(_Comments())  # LibCST's own visit: gradfix.walk does not visit comments
    return found


def docs_section(rule: type[BaseRule], title: str) -> str:
    """The text under ``## title`` in a rule's docstring ('' if absent)."""
    text = rule.docs()
    marker = f"## {title}"
    start = text.find(marker)
    if start < 0:
        return ""
    body = text[start + len(marker) :]
    end = body.find("\n## ")
    return (body if end < 0 else body[:end]).strip()
