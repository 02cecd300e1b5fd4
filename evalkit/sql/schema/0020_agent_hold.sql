-- The agent of a batch is held once per batch instead of once per row it writes.
--
-- sessions.agent_id and trace_sessions.agent_id referred to agents with foreign keys, so
-- every row a batch wrote (about 64 traces and 64 sessions for 512 spans) checked and
-- share-locked the agent's row on its own. Those checks were a tenth of the database's
-- work for a batch. Instead, the statements that create these rows hold the agent's row
-- (FOR KEY SHARE) once: trace_claim_many for a batch, agent_hold for an orphan trace. An
-- agent's delete locks the row FOR UPDATE, so it waits for every batch holding it, and a
-- batch after it finds no agent; the delete then removes the agent's sessions and traces
-- itself (agent_delete), as the foreign keys' ON DELETE CASCADE did.
ALTER TABLE sessions DROP CONSTRAINT sessions_agent_id_fkey;
ALTER TABLE trace_sessions DROP CONSTRAINT trace_sessions_agent_id_fkey;
