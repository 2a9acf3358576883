"""D_eff while a model trains: callbacks for the training loops people already run.

- :mod:`effdepth.integrations.transformers`: ``DeffCallback``, a ``transformers.TrainerCallback``;
- :mod:`effdepth.integrations.lightning`: ``DeffCallback``, a Lightning ``Callback``.

Both are thin: what a step measures, how, and where it is written is :class:`~effdepth.integrations.training.
TrainingMeasurement`, which runs the one measurement path of ``effdepth measure``. Nothing here is imported by
``import effdepth``, so neither framework is needed until its callback is used.
"""
