"""The stack trace sent with each resource: only the frame of the program's line that made it
(components/common/registration.py), on the pinned SDK."""

import pulumi.runtime.resource as sdk_resource

from components.common import registration


class _Base:  # the SDK's Resource.__init__
    def __init__(self, capture):
        capture(sdk_resource._get_stack_trace())


class _Kind(_Base):  # CustomResource / ComponentResource
    def __init__(self, capture):
        super().__init__(capture)


class _Concrete(_Kind):  # a resource class (local.Command)
    def __init__(self, capture):
        super().__init__(capture)


def _made_here(capture):
    return _Concrete(capture)  # the registering frame


def _sdk_own():
    """The SDK's own function, whether or not a program run in this process patched it."""
    return getattr(sdk_resource._get_stack_trace, "full_trace", sdk_resource._get_stack_trace)


def _traces() -> list:
    traces = []
    _made_here(traces.append)
    return traces


def test_only_the_registering_frame_is_sent_and_its_source_position_is_unchanged(monkeypatch):
    monkeypatch.setattr(sdk_resource, "_get_stack_trace", _sdk_own())
    registration.send_only_the_registering_frame()
    [trace] = _traces()
    assert len(trace.frames) == 1
    assert trace.frames[0].pc.uri.endswith("/tests/test_registration.py")
    line = _made_here.__code__.co_firstlineno + 1
    assert trace.frames[0].pc.line == line
    assert sdk_resource._get_source_position(trace).line == line


def test_the_sdk_alone_sends_every_frame_below_the_resource(monkeypatch):
    """What the patch cuts: without it the SDK sends this test's whole stack (pytest's frames)."""
    monkeypatch.setattr(sdk_resource, "_get_stack_trace", _sdk_own())
    [trace] = _traces()
    assert len(trace.frames) > 5
    assert trace.frames[0].pc.line == _made_here.__code__.co_firstlineno + 1


def test_patching_twice_keeps_one_frame_and_wraps_once(monkeypatch):
    monkeypatch.setattr(sdk_resource, "_get_stack_trace", _sdk_own())
    registration.send_only_the_registering_frame()
    patched = sdk_resource._get_stack_trace
    registration.send_only_the_registering_frame()
    assert sdk_resource._get_stack_trace is patched
    assert len(_traces()[0].frames) == 1
