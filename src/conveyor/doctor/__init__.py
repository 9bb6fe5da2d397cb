"""``loader.doctor()`` / ``conveyor doctor``: where a loader's time goes, what to change,
and a short run that checks the change (docs/guide/doctor.md).

Below the DataLoader in the layers: it reads the loader it is given through its public
attributes and ``stats()``, and asks it for a changed copy (``_conveyor_variant``).
"""

from __future__ import annotations

from conveyor.doctor.diagnosis import Diagnosis, Fix, LoaderFacts
from conveyor.doctor.examine import examine
from conveyor.doctor.report import Counterfactual, DoctorReport

__all__ = ["Counterfactual", "Diagnosis", "DoctorReport", "Fix", "LoaderFacts", "examine"]
