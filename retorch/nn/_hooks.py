"""``RemovableHandle``: what ``register_*_hook`` returns. Mirrors torch/utils/hooks.py."""

from __future__ import annotations

import weakref
from typing import Any


class RemovableHandle:
    """A handle that removes its hook from the dict(s) it was registered in."""

    next_id: int = 0

    def __init__(self, hooks_dict: Any, *, extra_dict: Any = None) -> None:
        self.hooks_dict_ref = weakref.ref(hooks_dict)
        self.id = RemovableHandle.next_id
        RemovableHandle.next_id += 1
        extras = (
            extra_dict
            if isinstance(extra_dict, list)
            else [extra_dict]
            if extra_dict is not None
            else []
        )
        self.extra_dict_ref = tuple(weakref.ref(d) for d in extras)

    def remove(self) -> None:
        for ref in (self.hooks_dict_ref, *self.extra_dict_ref):
            hooks = ref()
            if hooks is not None and self.id in hooks:
                del hooks[self.id]

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *args) -> None:
        self.remove()
