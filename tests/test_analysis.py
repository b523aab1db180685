"""Shared analysis: torch names, leaves, grad mode."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from gradfix.analysis import FileAnalysis, _argument, _is_false, _is_true


def analyse(code: str) -> tuple[FileAnalysis, cst.Module]:
    module = cst.parse_module(textwrap.dedent(code).lstrip("\n"))
    return FileAnalysis(module), module


def find(module: cst.Module, kind: type, predicate=lambda n: True) -> list:
    found = []

    class Finder(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, kind) and predicate(node):
                found.append(node)
            return True

    module.visit(Finder())
    return found


def calls(module: cst.Module) -> list[cst.Call]:
    return find(module, cst.Call)


@pytest.mark.parametrize(
    ("imports", "expression", "expected"),
    [
        ("import torch", "torch.nn.Parameter", "torch.nn.Parameter"),
        ("import torch as th", "th.tensor", "torch.tensor"),
        ("import torch.nn as nn", "nn.Parameter", "torch.nn.Parameter"),
        ("from torch import nn, tensor", "tensor", "torch.tensor"),
        ("from torch.nn import Parameter", "Parameter", "torch.nn.Parameter"),
        ("import torch.nn.functional as F", "F.relu", "torch.nn.functional.relu"),
        ("from torch.nn import functional as F", "F.relu", "torch.nn.functional.relu"),
        ("import torch.nn", "torch.nn.Parameter", "torch.nn.Parameter"),
        ("from torch.nn.parameter import Parameter", "Parameter", "torch.nn.Parameter"),
        ("import numpy as np", "np.zeros", "numpy.zeros"),
        ("import numpy as torch", "torch.tensor", "numpy.tensor"),
    ],
)
def test_qualified_names(imports: str, expression: str, expected: str) -> None:
    analysis, module = analyse(f"{imports}\n{expression}(1)\n")
    assert analysis.qualified_name(calls(module)[-1].func) == expected


def test_local_named_torch_is_not_torch() -> None:
    analysis, module = analyse(
        """
        import torch
        def f(torch):
            return torch.tensor(1)
        def g():
            torch = make()
            return torch.tensor(2)
        def h():
            return torch.tensor(3)
        """
    )
    names = [analysis.call_name(c) for c in calls(module) if c.args]
    assert names == [None, None, "torch.tensor"]


def test_optional_import_pattern_still_resolves() -> None:
    analysis, module = analyse(
        """
        try:
            import torch
        except ImportError:
            torch = None
        x = torch.zeros(1)
        """
    )
    assert analysis.call_name(calls(module)[-1]) == "torch.zeros"
    assert analysis.torch_alias() == "torch"


def leaf_at_last_use(code: str, name: str) -> object:
    analysis, module = analyse(code)
    uses = find(module, cst.Name, lambda n: n.value == name)
    return analysis.leaf_reason(uses[-1])


@pytest.mark.parametrize(
    "code",
    [
        "import torch\nw = torch.nn.Parameter(torch.rand(3))\nw\n",
        "import torch\nw = torch.randn(3, requires_grad=True)\nw\n",
        "import torch\nw = torch.randn(3).mul(2).requires_grad_()\nw\n",
        "import torch\nw = torch.FloatTensor(3)\nw.requires_grad = True\nw\n",
        "import torch\nv = torch.ones(2, requires_grad=True)\nw = v\nw\n",
        "import torch\nm = torch.nn.Linear(2, 2)\nfor w in m.parameters():\n    w\n",
        "import torch\nm = torch.nn.Linear(2, 2)\nfor n, w in m.named_parameters():\n    w\n",
        "import torch\ndef f(w: torch.nn.Parameter):\n    w\n",
        "import torch\nw, b = torch.zeros(2, requires_grad=True), torch.zeros(1)\nw\n",
    ],
)
def test_leaves(code: str) -> None:
    assert leaf_at_last_use(code, "w") is not None


@pytest.mark.parametrize(
    "code",
    [
        "import torch\nw = torch.randn(3, requires_grad=True) * 0.01\nw\n",
        "import torch\nw = torch.randn(3)\nw\n",
        "import torch\nw = torch.nn.Parameter(torch.rand(3), requires_grad=False)\nw\n",
        "import torch\nw = torch.randn(3, requires_grad=True)\nw = w * 2\nw\n",
        "import torch\nw = torch.randn(3, requires_grad=True)\nw.requires_grad_(False)\nw\n",
        "import torch\nm = torch.nn.Linear(2, 2)\nfor w, p in m.named_parameters():\n    w\n",
        "w = make()\nw\n",
    ],
)
def test_not_leaves(code: str) -> None:
    assert leaf_at_last_use(code, "w") is None


def test_self_attributes_and_layer_parameters() -> None:
    analysis, module = analyse(
        """
        import torch
        from torch import nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = nn.Parameter(torch.zeros(3))
                self.fc = nn.Linear(3, 3)
                self.scale = 2.0
            def go(self):
                self.w
                self.fc.weight
                self.scale
        """
    )
    attrs = find(module, cst.Attribute, lambda n: analysis.enclosing_function(n) is not None)
    by_code = {cst.Module([]).code_for_node(a): a for a in attrs}
    assert analysis.leaf_reason(by_code["self.w"]) is not None
    assert analysis.leaf_reason(by_code["self.fc.weight"]) is not None
    assert analysis.leaf_reason(by_code["self.scale"]) is None


def test_no_grad_contexts() -> None:
    analysis, module = analyse(
        """
        import torch
        from torch import no_grad
        with torch.no_grad():
            a()
            with torch.enable_grad():
                b()
        with no_grad():
            c()
        with torch.inference_mode():
            d()
        with torch.inference_mode(False):
            e()
        with torch.set_grad_enabled(False):
            f()
        @torch.no_grad()
        def decorated():
            g()
        def helper():
            h()
        with torch.no_grad():
            helper()
        def sometimes():
            i()
        sometimes()
        with torch.no_grad():
            sometimes()
        """
    )
    state = {
        c.func.value: analysis.in_no_grad(c)
        for c in calls(module)
        if isinstance(c.func, cst.Name) and len(c.func.value) == 1
    }
    assert state == {
        "a": True,
        "b": False,
        "c": True,
        "d": True,
        "e": False,
        "f": True,
        "g": True,
        "h": True,
        "i": False,
    }


def test_requires_grad_follows_index_fill() -> None:
    analysis, module = analyse(
        """
        import torch
        p = torch.nn.Parameter(torch.rand(2))
        buf = torch.zeros(3)
        buf[0] = p[0]
        out = buf * 2
        data = torch.zeros(3)
        data[0] = 1.0
        other = data * 2
        out
        other
        """
    )
    uses = {n.value: n for n in find(module, cst.Name) if n.value in ("out", "other")}
    assert analysis.requires_grad(uses["out"])
    assert not analysis.requires_grad(uses["other"])


def test_binding_in_another_branch_does_not_reach() -> None:
    analysis, module = analyse(
        """
        import torch
        t = [1, 2]
        if cond:
            t = torch.stack(t)
        else:
            t
        t
        """
    )
    uses = [n for n in find(module, cst.Name) if n.value == "t"]
    in_else, after = uses[-2], uses[-1]
    first = analysis.reaching_binding(in_else)
    assert first is not None and isinstance(first.value, cst.List)
    last = analysis.reaching_binding(after)
    assert last is not None and isinstance(last.value, cst.Call)


def last_use(module: cst.Module, name: str) -> cst.Name:
    return [n for n in find(module, cst.Name) if n.value == name][-1]


@pytest.mark.parametrize(
    "code",
    [
        "import torch\ndef make():\n    return torch.randn(3, requires_grad=True)\nw = make()\nw\n",
        "import torch\ndef make():\n    v = torch.nn.Parameter(torch.rand(2))\n    return v\n"
        "w = make()\nw\n",
        "import torch\ndef init():\n    return torch.zeros(1), torch.ones(2, requires_grad=True)\n"
        "b, w = init()\nw\n",
        "import torch\nclass M(torch.nn.Module):\n    def build(self):\n"
        "        return torch.nn.Parameter(torch.rand(2))\n    def go(self):\n"
        "        w = self.build()\n        w\n",
    ],
)
def test_leaves_returned_by_functions_of_the_file(code: str) -> None:
    assert leaf_at_last_use(code, "w") is not None


@pytest.mark.parametrize(
    "code",
    [
        # the other element of the returned tuple
        "import torch\ndef init():\n    return torch.zeros(1), torch.ones(2, requires_grad=True)\n"
        "w, b = init()\nw\n",
        # some path returns something else
        "import torch\ndef make(f):\n    if f:\n        return None\n"
        "    return torch.ones(2, requires_grad=True)\nw = make(1)\nw\n",
        # a generator, and a name bound twice
        "import torch\ndef make():\n    yield torch.ones(2, requires_grad=True)\nw = make()\nw\n",
        "import torch\ndef make():\n    return torch.ones(2, requires_grad=True)\nmake = g\n"
        "w = make()\nw\n",
    ],
)
def test_not_leaves_through_functions(code: str) -> None:
    assert leaf_at_last_use(code, "w") is None


def test_requires_grad_through_returned_values_and_modules() -> None:
    analysis, module = analyse(
        """
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Sequential(nn.Linear(3, 4), nn.Tanh())
                self.p = nn.Parameter(torch.rand(4))

            def scaled(self):
                return self.p * 2

            def forward(self, x):
                s = self.scaled()
                h = self.body(x)
                s
                h

        def run(model, x):
            out = model(x)
            out

        def plain(x):
            return x * 2

        run(Net(), torch.rand(3))
        d = plain(torch.rand(3))
        d
        """
    )
    assert analysis.requires_grad(last_use(module, "s"))
    assert analysis.requires_grad(last_use(module, "h"))
    assert analysis.requires_grad(last_use(module, "out"))
    assert not analysis.requires_grad(last_use(module, "d"))
    assert analysis.is_tensor(last_use(module, "s"))


@pytest.mark.parametrize(
    ("code", "count", "certain"),
    [
        ("xs = []\nfor i in range(3):\n    xs.append(i)\nxs\n", 1, True),
        ("xs = [a]\nxs.append(b)\nxs += [c, d]\nxs.extend([e])\nxs\n", 5, True),
        ("xs = []\nfor i in range(n):\n    xs.append(i)\nxs\n", 1, False),
        ("xs = []\nif c:\n    xs.append(a)\nxs\n", 1, False),
        ("xs = []\nxs.append(a)\nn = len(xs)\nxs\n", 1, True),
    ],
)
def test_list_elements(code: str, count: int, certain: bool) -> None:
    analysis, module = analyse(code)
    found = analysis.list_elements(last_use(module, "xs"), last_use(module, "xs"))
    assert found is not None
    elements, is_certain = found
    assert (len(elements), is_certain) == (count, certain)


@pytest.mark.parametrize(
    "code",
    [
        "xs = []\nxs.append(a)\nfill(xs)\nxs\n",  # passed away: anything may be added
        "xs = []\nxs.insert(0, a)\nxs\n",
        "xs = []\nxs.extend(other)\nxs\n",
        "xs = list(other)\nxs.append(a)\nxs\n",
        "xs = []\nxs[0:0] = [a]\nxs\n",
    ],
)
def test_list_elements_unknown(code: str) -> None:
    analysis, module = analyse(code)
    assert analysis.list_elements(last_use(module, "xs"), last_use(module, "xs")) is None


def test_forward_parameters_with_defaults_are_configuration() -> None:
    analysis, module = analyse(
        """
        import torch
        from torch import nn

        class Embedding(nn.Module):
            def forward(self, coords, input_shape=None):
                coords
                input_shape
        """
    )
    assert analysis.requires_grad(last_use(module, "coords"))
    assert not analysis.requires_grad(last_use(module, "input_shape"))


def test_name_nodes_in_finds_every_name_node_under_a_root_in_order() -> None:
    import libcst as cst

    from gradfix.analysis import FileAnalysis

    module = cst.parse_module("x = f(x, k=x.x)\ndef g(x):\n    return x\ny = x\n")
    analysis = FileAnalysis(module)
    first = module.body[0].body[0]
    found = analysis.name_nodes_in(first.value, "x")  # the Name nodes, attribute names included
    assert [analysis.index(n) for n in found] == sorted(analysis.index(n) for n in found)
    assert len(found) == 3 and len(analysis.name_nodes_in(module, "x")) == 7
    assert analysis.name_nodes_in(first, "nothing") == []
    assert analysis.name_nodes_in(cst.Name("x"), "x") == []  # a node of another tree


def test_a_function_returning_a_call_of_itself_ends_the_search() -> None:
    """Found on transformers' chat_template_utils.py: ``return plain(value.item())``."""
    from gradfix.engine import lint_source
    from gradfix.registry import all_rules

    source = (
        "import torch\n"
        "w = torch.zeros(3, requires_grad=True)\n"
        "def plain(value):\n"
        "    if isinstance(value, list):\n"
        "        return [plain(v) for v in value]\n"
        "    return plain(value.item())\n"
        "y = plain(1)\n"
        "y = y * 2\n"
    )
    assert lint_source(source, rules=all_rules()).findings == []


def test_arguments_passed_on_through_many_call_sites_do_not_multiply_the_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """transformers' modular_hgnet_v2.py: each function passes its parameters to the next
    from several call sites; requires_grad used to re-walk every path (minutes)."""
    from gradfix.analysis import FileAnalysis
    from gradfix.engine import lint_source
    from gradfix.registry import all_rules
    from gradfix.semantic.grad import GradQueries

    layers = ["import torch", "def f0(x, y):", "    return torch.tensor([x, y])"]
    for level in range(1, 8):
        layers += [
            f"def f{level}(x, y):",
            *[f"    a{k} = f{level - 1}(x, y)" for k in range(4)],
            "    return a0",
        ]
    calls = []
    # rules on LibCST ask FileAnalysis, rules on ast (GF101 here) ask the Semantic
    for analysis in (FileAnalysis, GradQueries):
        real = analysis._requires_grad

        def counting(self, expr, at, depth, real=real):  # type: ignore[no-untyped-def]
            calls.append(depth)
            return real(self, expr, at, depth)

        monkeypatch.setattr(analysis, "_requires_grad", counting)
    lint_source("\n".join(layers) + "\n", rules=all_rules())
    assert 0 < len(calls) < 2_000  # every path walked again: 4 ** 7 call sites and more


def test_function_nested_in_a_method_is_not_a_method() -> None:
    # found by tests/test_properties.py: a script wrapped in a method lost its findings,
    # its functions were taken for methods (called as `obj.f(...)`, first parameter self)
    analysis, module = analyse(
        """
        import torch
        class Runner:
            def run(self):
                def loss_function(x):
                    return x.sqrt()
                loss_function(torch.rand(3, requires_grad=True))
        """
    )
    by_name = {f.name.value: f for f in find(module, cst.FunctionDef)}
    assert analysis.method_class(by_name["run"]) is not None
    assert analysis.method_class(by_name["loss_function"]) is None
    param = by_name["loss_function"].params.params[0]
    passed = [cst.Module([]).code_for_node(arg) for arg, _ in analysis.passed_arguments(param)]
    assert passed == ["torch.rand(3, requires_grad=True)"]


class _RequiresGradWalk(cst.CSTVisitor):
    """The reference: every ``x.requires_grad = flag`` / ``x.requires_grad_(flag)`` by a
    walk of the scope (what the analysis did before it used its index of names)."""

    def __init__(self) -> None:
        self.found: list[tuple[cst.CSTNode, bool]] = []

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            t = target.target
            if isinstance(t, cst.Attribute) and t.attr.value == "requires_grad":
                if _is_true(node.value) or _is_false(node.value):
                    self.found.append((node, _is_true(node.value)))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "requires_grad_":
            flag = _argument(node, "requires_grad", 0)
            self.found.append((node, flag is None or _is_true(flag.value)))


def test_requires_grad_marks_from_the_name_index_match_a_walk_of_each_scope() -> None:
    from pathlib import Path

    from gradfix.analysis import FileAnalysis
    from gradfix.walk import walk

    root = Path(__file__).resolve().parents[1]
    sources = [p.read_text(encoding="utf-8") for p in sorted(root.glob("fixtures/*/*.py"))]
    sources.append(
        "import torch\nw = torch.ones(2)\nw.requires_grad = True\nv = w * 2\n"
        "a.requires_grad = b.requires_grad = False\nv.requires_grad_(False)\n"
        "def f(x):\n    x.requires_grad_()\n    x.requires_grad = flag\n"
    )
    compared = 0
    for source in sources:
        if "requires_grad" not in source:
            continue
        analysis = FileAnalysis(cst.parse_module(source))
        for scope in analysis._scopes.values():
            reference = _RequiresGradWalk()
            walk(scope.node, reference)
            got = analysis._requires_grad_statements(scope)
            assert sorted((id(n), f) for n, f in got) == sorted(
                (id(n), f) for n, f in reference.found
            )
            compared += 1
    assert compared > 50


@pytest.mark.parametrize(
    "code",
    [
        # an attribute rebound from a method of itself
        "class M(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.m = torch.zeros(3)\n"
        "    def forward(self, x):\n"
        "        self.m = self.m.to(x.device)\n"
        "        self.m.data.add_(1)\n"
        "        return x\n",
        # two attributes defined through each other
        "class M(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.a = self.b.float()\n"
        "        self.b = self.a.float()\n"
        "    def forward(self, x):\n"
        "        self.a.data.mul_(2)\n"
        "        return x\n",
        # functions returning each other's results
        "def g(a):\n    return h(a).data\n"
        "def h(a):\n    return g(a).float()\n"
        "z = g(torch.zeros(3))\nz.data.zero_()\n",
    ],
    ids=["attribute-from-itself", "attributes-through-each-other", "mutual-functions"],
)
def test_values_defined_through_themselves_end_the_search(code: str) -> None:
    """Asking whether ``self.m`` is a tensor asked it again for ``self.m.to(...)`` with a
    fresh depth, forever (d2l's batch norm; RecursionError in every rule that asked)."""
    from gradfix.engine import lint_source
    from gradfix.registry import select_rules

    source = "import torch\nfrom torch import nn\n" + code
    lint_source(source, rules=select_rules(["ALL"], None), fix=True, unsafe_fixes=True)
