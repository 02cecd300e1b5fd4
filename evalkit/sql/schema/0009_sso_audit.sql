-- Login limits and the audit log (single sign-on itself needs no table: users.oidc_subject
-- binds an identity-provider subject to a user).

-- Failed password logins, one row per key: 'user:<username>' and 'addr:<client address>'.
-- failures counts the failures since the key's last success (users) or since it went quiet;
-- blocked_until is the earliest time the next attempt for this key is heard.
CREATE TABLE login_failures (
    key            text PRIMARY KEY,
    failures       integer NOT NULL,
    last_failed_at timestamptz NOT NULL DEFAULT now(),
    blocked_until  timestamptz,
    CONSTRAINT login_failures_key_format CHECK (key ~ '^(user|addr):.+$'),
    CONSTRAINT login_failures_failures_check CHECK (failures > 0)
);

-- What admins did: one row per action, written in the action's own transaction. actor is the
-- username at the time (kept when the user row goes); target names the thing acted on.
CREATE TABLE audit_log (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       timestamptz NOT NULL DEFAULT now(),
    actor_id bigint REFERENCES users (id) ON DELETE SET NULL,
    actor    text NOT NULL,
    action   text NOT NULL,
    target   text NOT NULL,
    detail   jsonb NOT NULL DEFAULT '{}'::jsonb,
    CONSTRAINT audit_log_action_format CHECK (action ~ '^[a-z_]+\.[a-z_]+$')
);
CREATE INDEX audit_log_at_idx ON audit_log (at DESC, id DESC);
