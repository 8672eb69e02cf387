"""Spec-checked stand-ins built from a REAL TensorRT binding module (imported with stub native libraries).

A ``StandIn(real_class)`` behaves like an instance of that pybind11 class for the code under test, but every use
is checked against the real class and each mismatch is recorded (``Recorder.violations``) instead of raised:

- attribute read: the real class (or a base) must have it; a method gives a checked callable, a property a value;
  a method read and then used as a value (``str(x.desc)``, ``if x.get_flag:``) is recorded too;
- method call: the arguments must bind to one of the overloads of the pybind11 signature line(s) in the real
  method's ``__doc__`` (count, keywords, and types: ``int``/``bool``/``float``/``str``/``buffer``/``Dims``/
  ``List[...]``, real enums by class, real classes by ``isinstance`` or stand-in class);
- property set: the real property must exist and have a setter, and the value must have the setter's type;
- a name the real class lacks is also an ``AttributeError`` (as the real binding raises), so feature probes
  (``try: ... except AttributeError``) behave as on that release; such a read is a violation unless it is in the
  driver's list of known probes.

Return values are plausible stand-ins of the declared return type (a class of the module: another StandIn;
``bool``: True; ``int``: 0; ``str``: ""; ``List[...]``: []; ``IHostMemory``: a buffer), overridable per name.
The module itself is wrapped by ``ModuleProxy``: the constructors the adapters call (``Builder``, ``OnnxParser``,
``Runtime``) return stand-ins after checking ``__init__``'s signature; everything else (enums, ``nptype``,
``ILogger``, the calibrator base classes) is the real object.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_OVERLOAD = re.compile(r"^\d+\.\s+")
_NESTED_OPEN = "([{<"
_NESTED_CLOSE = ")]}>"


@dataclass
class Recorder:
    """Every violation (``Class.attr: what``) and every deprecated name used, in order."""

    violations: list[str] = field(default_factory=list)
    deprecated: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    allowed_missing: frozenset[tuple[str, str]] = frozenset()

    def violation(self, text: str) -> None:
        if text not in self.violations:
            self.violations.append(text)


def _split_top(text: str, sep: str = ",") -> list[str]:
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in _NESTED_OPEN:
            depth += 1
        elif ch in _NESTED_CLOSE:
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    has_default: bool


@dataclass(frozen=True)
class Signature:
    text: str
    params: tuple[Param, ...]  # without self
    returns: str


def parse_signatures(name: str, doc: str | None) -> list[Signature]:
    """The pybind11 signature lines of ``name`` in ``doc`` (one per overload)."""
    sigs = []
    for raw in (doc or "").splitlines():
        line = _OVERLOAD.sub("", raw.strip())
        if not line.startswith(name + "(") or line.startswith(name + "(*args, **kwargs)"):
            continue
        depth, end = 0, -1
        for i, ch in enumerate(line[len(name):], start=len(name)):
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
                if depth == 0:
                    end = i
                    break
        if end < 0:
            continue
        inner = line[len(name) + 1:end]
        returns = line[end + 1:].strip().removeprefix("->").strip()
        params = []
        for part in _split_top(inner):
            head, _, default = part.partition("=")
            pname, _, ptype = head.partition(":")
            params.append(Param(pname.strip(), ptype.strip(), bool(default.strip())))
        if params and params[0].name in ("self", "arg0"):
            params = params[1:]
        sigs.append(Signature(line, tuple(params), returns))
    return sigs


def short(type_text: str) -> str:
    """``tensorrt_bindings.tensorrt.BuilderFlag`` / ``nvinfer1::BuilderFlag`` -> ``BuilderFlag``."""
    return type_text.replace("::", ".").rsplit(".", 1)[-1].strip()


class Checker:
    """Signature and type checks against one real module."""

    def __init__(self, trt: Any, recorder: Recorder):
        self.trt = trt
        self.rec = recorder

    def _real(self, type_text: str) -> Any:
        name = short(type_text)
        return getattr(self.trt, name, None) if "." in type_text.replace("::", ".") else None

    def type_ok(self, type_text: str, value: Any) -> bool:
        t = type_text.strip()
        if t.startswith(("Optional[", "typing.Optional[")):
            return value is None or self.type_ok(t[t.index("[") + 1:-1], value)
        if t.startswith(("List[", "typing.List[", "list[", "Sequence[", "typing.Sequence[")):
            inner = t[t.index("[") + 1:-1]
            return isinstance(value, (list, tuple)) and all(self.type_ok(inner, v) for v in value)
        if t == "int":
            return isinstance(value, int)
        if t == "bool":
            return isinstance(value, bool)
        if t == "float":
            return isinstance(value, (int, float))
        if t == "str":
            return isinstance(value, str)
        if t == "buffer":
            try:
                memoryview(value)
            except TypeError:
                return False
            return True
        if t in ("object", "capsule", "") or t.startswith(("Callable", "function")):
            return True
        name = short(t)
        if name in ("Dims", "Dims2", "Dims3", "Dims4", "DimsHW", "Permutation"):
            return isinstance(value, getattr(self.trt, "Dims", ())) or (
                isinstance(value, (tuple, list)) and all(isinstance(d, int) for d in value))
        real = self._real(t)
        if isinstance(real, type):
            if isinstance(value, StandIn):
                return issubclass(object.__getattribute__(value, "_cls"), real)
            return isinstance(value, real)
        return True  # a type this checker does not know is not judged

    def bind(self, where: str, sigs: list[Signature], args: tuple, kwargs: dict) -> Signature | None:
        """The overload ``args``/``kwargs`` bind to; records a violation naming every overload when none does."""
        problems = []
        for sig in sigs:
            why = self._bind_one(sig, args, kwargs)
            if why is None:
                return sig
            problems.append(f"{sig.text} ({why})")
        shown = ", ".join([type(a).__name__ for a in args] + [f"{k}={type(v).__name__}" for k, v in kwargs.items()])
        self.rec.violation(f"{where}({shown}) matches no signature: " + " | ".join(problems))
        return None

    def _bind_one(self, sig: Signature, args: tuple, kwargs: dict) -> str | None:
        params = list(sig.params)
        if len(args) > len(params):
            return f"{len(args)} positional arguments for {len(params)} parameters"
        given: dict[str, Any] = {p.name: a for p, a in zip(params, args, strict=False)}
        for k, v in kwargs.items():
            if k not in {p.name for p in params}:
                return f"no parameter {k!r}"
            if k in given:
                return f"{k!r} given twice"
            given[k] = v
        for p in params:
            if p.name not in given:
                if not p.has_default:
                    return f"missing {p.name!r}"
                continue
            if not self.type_ok(p.type, given[p.name]):
                return f"{p.name} wants {p.type}, got {type(given[p.name]).__name__} {given[p.name]!r:.60}"
        return None


def _find(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    return None


def deprecated_in_doc(doc: str | None) -> bool:
    return "[DEPRECATED]" in (doc or "") or "Deprecated in TensorRT" in (doc or "")


class MethodValue:
    """A bound method of a stand-in: calling it is checked; using it as a value is a violation."""

    def __init__(self, owner: StandIn, name: str, fn: Callable[..., Any]):
        self._owner, self._name, self._fn = owner, name, fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(*args, **kwargs)

    def _misuse(self, how: str) -> None:
        cls = object.__getattribute__(self._owner, "_cls").__name__
        object.__getattribute__(self._owner, "_rec").violation(
            f"{cls}.{self._name} is a method but was used as a value ({how})")

    def __bool__(self) -> bool:
        self._misuse("truth value")
        return True

    def __str__(self) -> str:
        self._misuse("str")
        return self._name

    def __format__(self, spec: str) -> str:
        self._misuse("format")
        return self._name

    def __int__(self) -> int:
        self._misuse("int")
        return 0

    __index__ = __int__

    def __iter__(self) -> Any:
        self._misuse("iteration")
        return iter(())

    def __eq__(self, other: object) -> bool:
        self._misuse("comparison")
        return False

    __hash__ = object.__hash__


class StandIn:
    """An instance of the real class ``cls`` as far as the code under test can tell; see the module doc."""

    def __init__(self, cls: type, checker: Checker, *, returns: dict[str, Any] | None = None,
                 values: dict[str, Any] | None = None):
        object.__setattr__(self, "_cls", cls)
        object.__setattr__(self, "_chk", checker)
        object.__setattr__(self, "_rec", checker.rec)
        object.__setattr__(self, "_returns", dict(returns or {}))
        object.__setattr__(self, "_values", dict(values or {}))
        object.__setattr__(self, "sets", {})

    def __repr__(self) -> str:
        return f"<stand-in {object.__getattribute__(self, '_cls').__name__}>"

    def __getattr__(self, name: str) -> Any:
        cls: type = object.__getattribute__(self, "_cls")
        rec: Recorder = object.__getattribute__(self, "_rec")
        chk: Checker = object.__getattribute__(self, "_chk")
        if name.startswith("__"):
            raise AttributeError(name)
        attr = _find(cls, name)
        if attr is None:
            if (cls.__name__, name) not in rec.allowed_missing:
                rec.violation(f"{cls.__name__}.{name} does not exist in TensorRT {chk.trt.__version__}")
            raise AttributeError(f"{cls.__name__!r} object has no attribute {name!r}")
        sets = object.__getattribute__(self, "sets")
        values = object.__getattribute__(self, "_values")
        if isinstance(attr, property):
            if deprecated_in_doc(getattr(attr, "__doc__", None)):
                rec.deprecated.append(f"{cls.__name__}.{name}")
            rec.calls.append(f"{cls.__name__}.{name}")
            if name in sets:
                return sets[name]
            if name in values:
                v = values[name]
                return v() if callable(v) and not isinstance(v, (type, StandIn)) else v
            ret = parse_signatures("", f"({attr.fget.__doc__ or ''}".replace("(arg0", "(self", 1))
            return default_value(chk, ret[0].returns if ret else "", self)
        if not callable(attr):
            return attr  # a class attribute (rare)
        sigs = parse_signatures(name, attr.__doc__)
        if deprecated_in_doc(attr.__doc__):
            rec.deprecated.append(f"{cls.__name__}.{name}")

        def call(*args: Any, **kwargs: Any) -> Any:
            rec.calls.append(f"{cls.__name__}.{name}")
            sig = chk.bind(f"{cls.__name__}.{name}", sigs, args, kwargs) if sigs else None
            if not sigs:
                rec.violation(f"{cls.__name__}.{name}: no signature line in the real __doc__ to check against")
            override = object.__getattribute__(self, "_returns").get(name)
            if sigs and sig is None:  # recorded; the scripted behaviour is not run with arguments that do not bind
                return default_value(chk, sigs[0].returns, self)
            if override is not None:
                return override(*args, **kwargs) if callable(override) else override
            return default_value(chk, sig.returns if sig else "", self)

        return MethodValue(self, name, call)

    def __setattr__(self, name: str, value: Any) -> None:
        cls: type = object.__getattribute__(self, "_cls")
        chk: Checker = object.__getattribute__(self, "_chk")
        rec: Recorder = object.__getattribute__(self, "_rec")
        attr = _find(cls, name)
        if not isinstance(attr, property):
            what = "a method" if attr is not None else "missing"
            rec.violation(f"{cls.__name__}.{name} = {value!r:.40}: not a property ({what}) in TensorRT "
                          f"{chk.trt.__version__}")
            raise AttributeError(f"can't set attribute {name!r}")
        if attr.fset is None:
            rec.violation(f"{cls.__name__}.{name} is read-only in TensorRT {chk.trt.__version__}")
            raise AttributeError(f"can't set attribute {name!r}")
        sigs = parse_signatures("f", "f" + (attr.fset.__doc__ or "").strip())
        if sigs and sigs[0].params:
            want = sigs[0].params[-1].type
            if not chk.type_ok(want, value):
                rec.violation(f"{cls.__name__}.{name} = {value!r:.60}: the setter takes {want}, got "
                              f"{type(value).__name__}")
        if deprecated_in_doc(attr.__doc__):
            rec.deprecated.append(f"{cls.__name__}.{name}")
        rec.calls.append(f"{cls.__name__}.{name}=")
        object.__getattribute__(self, "sets")[name] = value


class BufferStandIn(bytearray):
    """``IHostMemory`` (and other buffer-returning objects): real bytes, so ``memoryview`` works on it."""


def default_value(chk: Checker, returns: str, owner: Any) -> Any:
    t = returns.strip()
    if t in ("None", ""):
        return None
    if t == "bool":
        return True
    if t in ("int", "float"):
        return 0
    if t == "str":
        return ""
    if t.startswith(("List[", "typing.List[", "list[")):
        return []
    name = short(t)
    if name == "IHostMemory":
        return BufferStandIn(b"stand-in bytes")
    if name in ("Dims", "Dims2", "Dims3", "Dims4"):
        return (1,)
    real = getattr(chk.trt, name, None)
    if isinstance(real, type):
        members = getattr(real, "__members__", None)
        if members:
            return next(iter(members.values()))
        return StandIn(real, chk)
    return None


class ModuleProxy(types.ModuleType):
    """The real module, except the constructors listed in ``factories`` (name -> (args, kwargs) -> object),
    which are signature-checked against the real class's ``__init__`` and then build a stand-in."""

    def __init__(self, trt: Any, checker: Checker, factories: dict[str, Callable[..., Any]]):
        super().__init__(trt.__name__)
        self.__dict__["_trt"] = trt
        self.__dict__["_chk"] = checker
        self.__dict__["_factories"] = factories
        self.__dict__["__version__"] = trt.__version__

    def __getattr__(self, name: str) -> Any:
        trt = self.__dict__["_trt"]
        factory = self.__dict__["_factories"].get(name)
        if factory is None:
            return getattr(trt, name)  # AttributeError for a missing name, as the real module
        chk: Checker = self.__dict__["_chk"]
        real = getattr(trt, name)

        def construct(*args: Any, **kwargs: Any) -> Any:
            sigs = parse_signatures("__init__", real.__init__.__doc__)
            chk.rec.calls.append(f"{name}()")
            chk.bind(f"{name}", sigs, args, kwargs)
            return factory(*args, **kwargs)

        return construct
