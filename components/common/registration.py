"""What the program sends the engine with each resource, beside its inputs and options.

The Python SDK sends the whole stack of the registration: about 20 frames, most of them the
language host's, asyncio's and the SDK's own, and the engine keeps it in the state as each
resource's `stackTrace`. The local file backend writes the whole state at every step of an
update, so those frames are paid again at every step: 1.4 KB a resource, 23 % of a 64-node
cluster's state (docs/engine.md). Only the Pulumi Cloud console shows them.

`send_only_the_registering_frame` keeps the first frame, the program's line that made the
resource: the resource's `sourcePosition`, which the SDK takes from that frame, is unchanged,
and so is everything the engine decides. It patches the SDK's `_get_stack_trace`; an SDK
without it is left as it is (the state is then only larger), and tests/test_registration.py
pins the effect on the pinned SDK.
"""

import pulumi.runtime.resource as sdk_resource


def send_only_the_registering_frame() -> None:
    full_trace = getattr(sdk_resource, "_get_stack_trace", None)
    if full_trace is None or hasattr(full_trace, "full_trace"):
        return

    def registering_frame():
        trace = full_trace()
        del trace.frames[1:]
        return trace

    registering_frame.full_trace = full_trace  # what it trims (and: patched already)
    sdk_resource._get_stack_trace = registering_frame
