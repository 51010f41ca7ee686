-- The index of archives and sessions: the same tables as the SQLite index (store/sqlite.rs), with
-- PostgreSQL's types. `n` orders rows newest first, as SQLite's rowid does.
CREATE TABLE archives (
    n BIGSERIAL NOT NULL,
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    size BIGINT NOT NULL,
    hash TEXT NOT NULL UNIQUE,
    ops BIGINT NOT NULL,
    kernels BIGINT NOT NULL,
    regions BIGINT NOT NULL,
    uploaded_at TEXT NOT NULL
);
CREATE INDEX archives_newest ON archives (n DESC);

CREATE TABLE sessions (
    n BIGSERIAL NOT NULL,
    id TEXT PRIMARY KEY,
    archive TEXT NOT NULL,
    device TEXT NOT NULL,
    iterations BIGINT NOT NULL,
    do_check BOOLEAN NOT NULL,
    state TEXT NOT NULL,
    created_at TEXT NOT NULL,
    ended_at TEXT,
    passed BOOLEAN,
    error TEXT,
    control_hash TEXT NOT NULL,
    budget BIGINT,
    time_limit_s BIGINT,
    kind TEXT NOT NULL DEFAULT 'replay',
    compare_with TEXT,
    compare_all BOOLEAN NOT NULL DEFAULT FALSE,
    compare_against TEXT,
    cuda_mode TEXT
);
CREATE INDEX sessions_newest ON sessions (n DESC);
CREATE INDEX sessions_unfinished ON sessions (n) WHERE state IN ('queued', 'running');

-- A session's messages, each the JSON its viewers got (text, not jsonb: read back, it serialises
-- to the very same bytes).
CREATE TABLE events (
    session TEXT NOT NULL,
    seq BIGINT NOT NULL,
    json TEXT NOT NULL,
    PRIMARY KEY (session, seq)
);

-- The bytes of a session's bindings, kept until it ends.
CREATE TABLE session_bindings (
    session TEXT NOT NULL,
    name TEXT NOT NULL,
    bytes BYTEA NOT NULL,
    UNIQUE (session, name)
);
