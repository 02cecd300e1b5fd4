"""AgentTokenMemory: what the collector's edge remembers of an agent token, and for how long
(that a remembered token is still checked on every request is tests/integration's)."""

from __future__ import annotations

from evalkit.auth.access import Actor
from evalkit.edge.endpoint import AgentTokenMemory
from evalkit.store.agent_tokens import ResolvedAgentToken


def resolved(token_id: int) -> ResolvedAgentToken:
    return ResolvedAgentToken(Actor(agent_id=7), token_id, "bot", "dev")


def test_a_token_is_remembered_by_its_digest_until_it_expires():
    memory = AgentTokenMemory(60)
    memory.put("eka_one", resolved(1))
    assert memory.get("eka_one") == resolved(1)
    assert memory.get("eka_two") is None
    assert "eka_one" not in repr(memory.found)  # the digest is kept, not the token
    memory.forget("eka_one")
    assert memory.get("eka_one") is None

    expired = AgentTokenMemory(0)
    expired.put("eka_one", resolved(1))
    assert expired.get("eka_one") is None


def test_the_memory_is_bounded():
    memory = AgentTokenMemory(60, limit=3)
    for n in range(3):
        memory.put(f"eka_{n}", resolved(n))
    assert len(memory.found) == 3
    memory.put("eka_3", resolved(3))
    assert len(memory.found) == 1 and memory.get("eka_3") == resolved(3)
