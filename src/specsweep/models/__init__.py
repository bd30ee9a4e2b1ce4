"""The models: the one reader of a model's shape (`model_shape`), drafter configs, config-only replicas of published
pairs (`shaped`), the DFlash drafter and engine in torch (`dflash/`) and the embedded tiny pair (`tiny`)."""
