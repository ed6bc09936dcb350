"""Settings: the dataclasses (`schema`) and how YAML files, presets and `--set` build them (`loading`)."""

from gailkit.config.bc import BCConfig, resolve_obs_stats
from gailkit.config.doors import DOORS, read_settings, without_doors
from gailkit.config.fields import FieldError
from gailkit.config.loading import (
    PRESETS,
    build,
    from_dict,
    merge,
    migrate,
    nest,
    parse_override,
    preset,
    read_yaml,
    save_yaml,
    sources,
    to_dict,
)
from gailkit.config.schema import (
    DiscConfig,
    EnvConfig,
    ExpertConfig,
    FleetConfig,
    PolicyConfig,
    PPOConfig,
    SACConfig,
    TrainConfig,
)
from gailkit.core.errors import ConfigError

__all__ = [
    "PRESETS",
    "build",
    "from_dict",
    "merge",
    "migrate",
    "nest",
    "parse_override",
    "preset",
    "read_settings",
    "sources",
    "read_yaml",
    "DOORS",
    "without_doors",
    "save_yaml",
    "to_dict",
    "BCConfig",
    "DiscConfig",
    "EnvConfig",
    "ExpertConfig",
    "FieldError",
    "FleetConfig",
    "PolicyConfig",
    "PPOConfig",
    "SACConfig",
    "TrainConfig",
    "ConfigError",
    "resolve_obs_stats",
]
