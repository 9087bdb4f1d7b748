"""The composition's telemetry, from the config's ``telemetry:`` section."""

from __future__ import annotations

from ...shared.install_hint import install_extra
from ...telemetry import Telemetry, Tracing
from ..config.schema import ConfigError, LoadedConfig
from ..config.yaml_file import format_error


def telemetry_of(loaded: LoadedConfig) -> Telemetry:
    """The config's ``telemetry``: spans to its OTLP endpoint when one is set (the ``otel``
    extra; its SDK is imported only then). Metrics are turned on by the HTTP transport."""
    config = loaded.config
    endpoint = config.telemetry.otlp_endpoint
    if endpoint is None:
        return Telemetry()
    try:
        tracing = Tracing.to_otlp(endpoint, config.telemetry.service_name or config.name)
    except ImportError as exc:
        raise ConfigError(
            format_error(
                loaded.path,
                loaded.lines,
                ("telemetry", "otlp_endpoint"),
                f"needs the otel extra ({exc.name or 'opentelemetry'} is not installed): "
                f"{install_extra('otel')}",
            )
        ) from None
    return Telemetry(tracing)
