"""API routes, one module per area; ``ENDPOINTS`` lists them all."""

from evalkit.edge.endpoint import Endpoint
from evalkit.edge.routes import (
    accounts,
    agents,
    datasets,
    evaluators,
    experiments,
    fixtures,
    harness,
    judges,
    mappings,
    meta,
    otel,
    schedules,
    scores,
    sdk_scores,
    stats,
    tokens,
    trace_check,
    workspaces,
)

ENDPOINTS: list[Endpoint] = [
    *meta.ENDPOINTS,
    *accounts.ENDPOINTS,
    *workspaces.ENDPOINTS,
    *datasets.ENDPOINTS,
    *fixtures.ENDPOINTS,
    *agents.ENDPOINTS,
    *mappings.ENDPOINTS,
    *harness.ENDPOINTS,
    *experiments.ENDPOINTS,
    *schedules.ENDPOINTS,
    *scores.ENDPOINTS,
    *sdk_scores.ENDPOINTS,
    *stats.ENDPOINTS,
    *tokens.ENDPOINTS,
    *otel.ENDPOINTS,
    *trace_check.ENDPOINTS,
    *judges.ENDPOINTS,
    *evaluators.ENDPOINTS,
]
