"""What a fix declares about itself, handed to the oracle (which never reads the rules).

A rule's class data says what its fix may change besides the bug (see
:class:`gradfix.rule.BaseRule`): ``fix_restores_gradient`` (a cut gradient must come back,
so the weights torch made are checked for a lost gradient too), ``fix_changes_training``
(the optimizer may now step leaves it never stepped: judged by a replay that holds them),
``fix_drops_leaves`` (leaves the original made may no longer require grad). The caller
turns a fix's rule codes into a :class:`FixIntent` (:func:`gradfix.registry.fix_intent`);
a change made by hand (``verify --baseline``) has no declared intent:
:meth:`FixIntent.unknown` allows what a fix may legitimately change (it may make other
leaves train or stop making throw-away leaves) and demands no restored gradient.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FixIntent:
    codes: tuple[str, ...] = ()
    restores_gradient: bool = False
    changes_training: bool = False
    drops_leaves: bool = False
    #: False: a refactor made by hand, whose intent is unknown
    declared: bool = True

    @classmethod
    def unknown(cls) -> FixIntent:
        return cls(changes_training=True, drops_leaves=True, declared=False)


#: a fix that declares nothing beyond the bug
NO_INTENT = FixIntent()
