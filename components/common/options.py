"""Resource options a component hands to its children."""

import pulumi


def child_options(
    parent: pulumi.Resource,
    opts: pulumi.ResourceOptions | None,
    *depends_on: pulumi.Resource,
    delete_before_replace: bool = False,
    replace_with: list[pulumi.Resource] | None = None,
) -> pulumi.ResourceOptions:
    """The component as parent, plus its provider and dependencies, plus `depends_on`.

    Only `provider` and `depends_on` are passed on, not the whole of `opts`: aliases or
    ignore_changes meant for the component must not land on every child. `depends_on` is
    passed on because the engine does not make children wait for their parent's.
    `replace_with` names what the child lives on: when that is replaced, so is the child
    (engine >= 3.207), so whatever was set up inside the old one is set up again.
    """
    inherited = (opts.depends_on if opts else None) or []
    if not isinstance(inherited, list):
        inherited = [inherited]
    return pulumi.ResourceOptions(
        parent=parent,
        provider=opts.provider if opts else None,
        depends_on=[*inherited, *depends_on],
        delete_before_replace=delete_before_replace,
        replace_with=replace_with,
    )
