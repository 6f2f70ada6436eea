"""One registry of routers: a kind of router is registered once, by name, and runs everywhere by that name.

Taught in chapter 08 (a router of your own on the bench). A network asks each of its routing layers' routers from a
*router factory*, as torchvision's models ask their normalisation layers from ``norm_layer``: a function of what the
layer knows, :class:`LayerInfo` (how many capsules it routes from and to, their dimension, the network's squash, the
layer's place in the network). A registered kind is such a factory with a name and options, so a config can hold it as
data (a :class:`~capsule_lab.routing.RouterSpec`), a study or the bench can list it, and the command line can ask for
it::

    class MaxRouter(Router):                    # every input sends all of its vote to its best output
        ...
    register_router("max", MaxRouter)           # MaxRouter.from_layer(layer, spec) builds it for each layer

    CapsNet(CapsNetConfig.slim(router=RouterSpec("max")))
    DeepCapsNet(DeepCapsNetConfig.quick(squash="sabour"), router="max")     # built with the network's squash
    run_router_bench(settings, routers=["max"])
    capsule-lab bench routers --router mymodule:MaxRouter

A kind's builder is either a :class:`~capsule_lab.routing.Router` subclass (built by its classmethod
:meth:`~capsule_lab.routing.Router.from_layer`) or a function ``build(layer, spec) → Router``. ``options``: the
options a spec of the kind may set, by name with their defaults; the names of :class:`RouterSpec`'s own fields
(``iterations``, ``pose_bias``, ``kernels``, …) are read from the spec's fields, any other name from its ``options``.
``iterations``: the fewest iterations the kind accepts (None: the kind does not iterate; a spec's iterations are then
not read).

:func:`import_router` turns ``"module:Name"`` into a registered kind: it imports ``module`` (which may register kinds
as it is imported) and registers ``Name`` under the kind ``"module:Name"`` when it is a router class or a builder; so a
router written in the user's own module runs from the command line, and in a fresh process (the bench's memory
measure) it is found again by importing the same module.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional

from .._checks import check_positive_int
from .router import Router

__all__ = ["LayerInfo", "RouterKind", "register_router", "unregister_router", "router_kind", "router_kinds",
           "kind_module", "import_router"]


@dataclass(frozen=True)
class LayerInfo:
    """What a routing layer knows when it builds its router. Chapter 08.

    ``inputs`` I and ``outputs`` J: the capsules it routes from and to (a convolutional layer: those of one output
    position, I = K·K·T); ``dim``: the dimension D of the poses routed (16 for 4×4 pose matrices); ``activation``: the
    network's squash (None: the router's own default); ``index`` and ``layers``: the layer's place among the network's
    routing layers, input to output; ``convolutional``: True when the router routes every position of a grid with the
    same parameters (J capsule types per position), False for a fully-connected layer.
    """

    inputs: int
    outputs: int
    dim: int
    activation: Optional[Callable] = None
    index: int = 0
    layers: int = 1
    convolutional: bool = False

    def __post_init__(self):
        for name in ("inputs", "outputs", "dim", "layers"):
            check_positive_int(getattr(self, name), name)
        check_positive_int(self.index, "index", minimum=0)
        if self.index >= self.layers:
            raise ValueError(f"index must be in [0, layers) = [0, {self.layers}), got {self.index!r}")
        if self.activation is not None and not callable(self.activation):
            raise ValueError(f"activation must be a function of s (B, J, D) or None, got {self.activation!r}")

    def squash_options(self) -> dict:
        """``{"activation": the network's squash}``, or ``{}`` when the network leaves it to the router."""
        return {} if self.activation is None else {"activation": self.activation}


@dataclass(frozen=True)
class RouterKind:
    """A registered kind of router: its ``name``, its builder ``build(layer, spec) → Router``, the ``options`` a spec
    of it may set (name → default), the fewest ``iterations`` it accepts (None: not iterative) and a one-line
    ``summary``. Chapter 08."""

    name: str
    build: Callable
    options: Mapping[str, Any]
    iterations: Optional[int]
    summary: str = ""


_KINDS: dict[str, RouterKind] = {}


def _builder(build) -> Callable:
    """A builder ``(layer, spec) → Router`` from a Router subclass (its ``from_layer``) or a function."""
    if inspect.isclass(build):
        if not issubclass(build, Router):
            raise ValueError(f"a router kind's builder must be a capsule_lab.routing.Router subclass or a function "
                             f"(layer, spec) → Router, got the class {build.__name__}")
        return build.from_layer
    if not callable(build):
        raise ValueError(f"a router kind's builder must be a Router subclass or a function (layer, spec) → Router, "
                         f"got {build!r}")
    return build


def register_router(name: str, build, *, options: Optional[Mapping[str, Any]] = None,
                    iterations: Optional[int] = None, summary: str = "", replace: bool = False) -> RouterKind:
    """Register a kind of router under ``name`` (see the module docstring) and return it. A name registered already
    is an error unless ``replace=True`` (registering the same builder again is allowed: a module imported twice).
    Chapter 08."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    builder = _builder(build)
    options = dict(options or {})
    if not all(isinstance(k, str) and k.isidentifier() for k in options):
        raise ValueError(f"options must map option names (identifiers) to their defaults, got {sorted(options)!r}")
    if "iterations" in options or "kind" in options or "options" in options:
        raise ValueError("options must not name 'kind', 'iterations' or 'options' (iterations is its own argument)")
    if iterations is not None:
        check_positive_int(iterations, "iterations", minimum=0)
    kind = RouterKind(name, builder, MappingProxyType(options), iterations, summary)
    old = _KINDS.get(name)
    if old is not None and not replace and (old.build, dict(old.options), old.iterations) != (
            kind.build, options, kind.iterations):
        raise ValueError(f"a router kind named {name!r} is registered already (replace=True replaces it)")
    _KINDS[name] = kind
    return kind


def unregister_router(name: str) -> None:
    """Remove the kind ``name`` from the registry (a test's router, say). Chapter 08."""
    router_kind(name)
    del _KINDS[name]


def router_kind(name: str) -> RouterKind:
    """The registered kind ``name``; ``ValueError`` naming the registered kinds otherwise. A ``"module:Name"``
    reference not registered yet is imported (:func:`import_router`). Chapter 08."""
    if isinstance(name, str) and name not in _KINDS and ":" in name:
        import_router(name)
    if not isinstance(name, str) or name not in _KINDS:
        raise ValueError(f"kind must be one of {router_kinds()} (or a router registered with register_router, or "
                         f"'module:Name'), got {name!r}")
    return _KINDS[name]


def kind_module(name: str) -> str:
    """The module that defines the registered kind ``name``'s builder (a router class's own module): what a fresh
    process imports to find the kind again, ``"__main__"`` for one defined in a script or a notebook. Chapter 08."""
    build = router_kind(name).build
    owner = getattr(build, "__self__", build)                 # a router class's from_layer is bound to the class
    return getattr(owner, "__module__", "__main__") or "__main__"


def router_kinds() -> tuple:
    """The names of the registered kinds, in the order they were registered. Chapter 08."""
    return tuple(_KINDS)


def import_router(reference: str) -> str:
    """The kind a ``"module:Name"`` reference names: imports ``module``; if ``Name`` is then a registered kind, that
    kind; else the module's attribute ``Name`` (a Router subclass or a builder function) registered under the kind
    ``"module:Name"``. Returns the kind's name. Chapter 08."""
    if not isinstance(reference, str) or reference.count(":") != 1:
        raise ValueError(f"a router reference must be 'module:Name', got {reference!r}")
    module_name, attribute = reference.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"cannot import the module {module_name!r} of {reference!r}: {err}") from err
    if attribute in _KINDS:
        return attribute
    if reference in _KINDS:
        return reference
    if not hasattr(module, attribute):
        raise ValueError(f"module {module_name!r} has no attribute {attribute!r} and registers no kind of that name")
    register_router(reference, getattr(module, attribute), summary=f"{attribute} from {module_name}")
    return reference
