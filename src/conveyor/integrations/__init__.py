"""Opt-in glue for frameworks that build their own loaders from torch's class.

Most frameworks (Lightning, Hugging Face datasets) need nothing: conveyor's classes are
torch's subclasses, so they are recognised and rebuilt as conveyor loaders. accelerate is
the exception: ``Accelerator.prepare`` re-creates every loader from
``torch.utils.data.DataLoader`` by name, which would hand the loading back to torch's
engine; `use_conveyor_in_accelerate` makes it build conveyor loaders instead.
"""

from conveyor.integrations.accelerate import use_conveyor_in_accelerate

__all__ = ["use_conveyor_in_accelerate"]
