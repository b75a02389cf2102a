"""Cross-field rules checked beside field errors, so one run reports both.

pydantic runs a model's `mode="after"` validators (the cross-field rules) only once every
field of the model is valid: a stack file with one mistyped field and one subnet overlap would
show the overlap only after the first fix. When validation fails, this module rebuilds the
models from the valid parts of the input (pydantic validates each part as the model would),
leaving out every field that failed, and runs the rules on that. A rule that reads a field
left out stops with AttributeError: it is skipped, and counted, so the message can say that
more may follow. A rule whose inputs are all valid reports what it finds now.
"""

import contextvars
import functools
import types
import typing
from collections.abc import Callable, Iterable
from typing import Annotated, Any

from pydantic import BaseModel, TypeAdapter, ValidationError

Location = tuple[str | int, ...]

# A value a model's before-validator derives from other fields (ClusterConfig: the stand-in
# GPUs' device paths, from the cluster's name and the stand-in count). When those fields are
# invalid, nothing is derived and the field would read as its default: while rebuilding, the
# validator puts UNDERIVED there instead, and the field is left out like an invalid one.
UNDERIVED = type("Underived", (), {"__repr__": lambda self: "UNDERIVED"})()
_rebuilding = contextvars.ContextVar("rebuilding", default=False)


def rebuilding() -> bool:
    """Whether a before-validator runs for the rebuild (it may then derive UNDERIVED)."""
    return _rebuilding.get()


def valid_as(model: type[BaseModel], name: str, value: Any) -> bool:
    """Whether `value` is valid for the field `name` of `model` (for a derivation's inputs)."""
    try:
        _adapter(model, name).validate_python(value)
    except ValidationError:
        return False
    return True


def _holds_underived(value: Any) -> bool:
    if value is UNDERIVED:
        return True
    if isinstance(value, dict):
        return any(_holds_underived(item) for item in value.values())
    if isinstance(value, list):
        return any(_holds_underived(item) for item in value)
    return False


@functools.cache
def _adapter(model: type[BaseModel], name: str) -> TypeAdapter:
    """Validates one field's value as `model` does (its type, constraints and strictness)."""
    info = model.model_fields[name]
    return TypeAdapter(Annotated[info.annotation, info])


def _shape(annotation: Any) -> tuple[str, type[BaseModel] | None]:
    """('model', M) for M or M | None, ('list', M) for list[M] (or | None), else ('leaf', None)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "model", annotation
    inner = typing.get_args(annotation)
    if typing.get_origin(annotation) is list and isinstance(inner[0], type) and issubclass(inner[0], BaseModel):
        return "list", inner[0]
    return "leaf", None


def _validators(model: type[BaseModel], mode: str) -> list:
    return [d for d in model.__pydantic_decorators__.model_validators.values() if d.info.mode == mode]


def _has_rules(annotation: Any, seen: frozenset = frozenset()) -> bool:
    """Whether a value of this type holds a model with cross-field rules (after-validators)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return False
        return bool(_validators(annotation, "after")) or any(
            _has_rules(info.annotation, seen | {annotation}) for info in annotation.model_fields.values()
        )
    args = typing.get_args(annotation) if typing.get_origin(annotation) is not None else ()
    return any(_has_rules(arg, seen) for arg in args)


class _Check:
    """One pass over the input: the rules' problems as error details, and what was skipped."""

    def __init__(self, failed: list[Location]):
        self.failed = failed
        self.problems: list[dict] = []
        self.skipped = 0

    def _failed_under(self, path: Location, *, strictly: bool = False) -> bool:
        return any(loc[: len(path)] == path and (len(loc) > len(path) or not strictly) for loc in self.failed)

    def build(self, model: type[BaseModel], data: Any, path: Location) -> BaseModel | None:
        """`model` from `data`, its failed fields left out; its rules run where a field failed."""
        if not self._failed_under(path) and not _holds_underived(data):
            return model.model_validate(data)
        if not isinstance(data, dict):
            self.skipped += _has_rules(model)
            return None
        token = _rebuilding.set(True)
        try:
            for validator in _validators(model, "before"):
                data = validator.func(data)
        except Exception:  # noqa: BLE001 (the error is reported already; nothing to build on)
            self.skipped += _has_rules(model)
            return None
        finally:
            _rebuilding.reset(token)
        values, left_out = {}, set()
        field_validators = model.__pydantic_decorators__.field_validators.values()
        for name, info in model.model_fields.items():
            if name not in data:
                continue
            value = self.field(model, name, data[name], (*path, name))
            # A field with a validator of the model's own is only known valid when nothing failed.
            if value is _LEFT_OUT or any(name in v.info.fields for v in field_validators):
                left_out.add(name)
                self.skipped += value is _LEFT_OUT and _has_rules(info.annotation)
            else:
                values[name] = value
        instance = model.model_construct(_fields_set={k for k in data if k in model.model_fields}, **values)
        for name in left_out:
            instance.__dict__.pop(name, None)  # reading it raises AttributeError
        if self._failed_under(path, strictly=True):  # pydantic never got to the model's rules
            self.rules(instance, path)
        return instance

    def field(self, model: type[BaseModel], name: str, value: Any, path: Location) -> Any:
        if value is UNDERIVED:  # the rules reading it count as skipped when they do
            return _LEFT_OUT
        if not self._failed_under(path) and not _holds_underived(value):
            try:
                return _adapter(model, name).validate_python(value)
            except ValidationError:  # valid only in a context the field alone lacks: not used
                self.skipped += _has_rules(model.model_fields[name].annotation)
                return _LEFT_OUT
        shape, inner = _shape(model.model_fields[name].annotation)
        if shape == "model":
            built = self.build(inner, value, path)
            return _LEFT_OUT if built is None else built
        if shape == "list" and isinstance(value, list) and path not in self.failed:
            items = [self.build(inner, item, (*path, i)) for i, item in enumerate(value)]
            return _LEFT_OUT if any(item is None for item in items) else items
        return _LEFT_OUT

    def rules(self, instance: BaseModel, path: Location) -> None:
        """The model's rules, each skipped when it reads a field left out."""

        def run(rule: Callable[[], Iterable[str]]) -> list[str] | None:
            try:
                return list(rule())
            except ValueError as error:
                return str(error).splitlines()
            except Exception:  # noqa: BLE001 (AttributeError mostly: it read a field left out)
                self.skipped += 1
                return None

        if hasattr(instance, "rule_problems"):
            messages = instance.rule_problems(run)
        else:
            messages = [
                line
                for validator in _validators(type(instance), "after")
                for line in run(lambda v=validator: v.func(instance) and ()) or []
            ]
        self.problems += [{"loc": path, "msg": message, "type": "value_error"} for message in messages]


_LEFT_OUT = object()


def with_rules_beside(model: type[BaseModel], data: Any, error: ValidationError) -> tuple[list[dict], int]:
    """The error's details, then the problems the rules find in the valid parts of `data`;
    and how many rules were skipped because a field they read failed."""
    details = error.errors()
    check = _Check([tuple(detail["loc"]) for detail in details])
    try:
        check.build(model, data, ())
    except Exception:  # noqa: BLE001 (the field errors stand alone, and the rules count as not checked)
        return details, max(check.skipped, 1)
    return details + check.problems, check.skipped
