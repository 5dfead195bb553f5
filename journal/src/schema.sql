-- The run journal, schema version 1. One database per graph run; a resumed
-- run adds rows to the same database. Times are Unix seconds (REAL), so
-- `datetime(started, 'unixepoch')` prints them in sqlite3.

-- Key-value facts about the database itself: schema_version.
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- One row per run of the graph: the first run is 1, each resume adds one.
CREATE TABLE IF NOT EXISTS runs (
    run          INTEGER PRIMARY KEY,
    graph_path   TEXT NOT NULL,   -- the graph file as given
    graph_hash   TEXT NOT NULL,   -- hash of graph_spec
    graph_spec   TEXT NOT NULL,   -- the expanded graph, as JSON, after relabelling
    started      REAL NOT NULL,
    ended        REAL,            -- NULL while running, or if the runner was killed
    status       TEXT NOT NULL,   -- running | succeeded | failed | interrupted
    host         TEXT NOT NULL,   -- where the runner ran
    command_line TEXT NOT NULL,
    output_dir   TEXT NOT NULL    -- where this run's stdout/stderr files go
);

-- The executors a run had, with the cores each may use.
CREATE TABLE IF NOT EXISTS executors (
    run      INTEGER NOT NULL REFERENCES runs(run),
    executor INTEGER NOT NULL,    -- index within its node
    node     TEXT NOT NULL,       -- the node's host name
    labels   TEXT NOT NULL,       -- its contexts, comma separated, in priority order
    cores    INTEGER NOT NULL,    -- cores it may use (threads it runs on)
    PRIMARY KEY (run, executor, node)
);

-- One row per activity of the graph, as it stands after the latest run.
CREATE TABLE IF NOT EXISTS activities (
    id        TEXT PRIMARY KEY,   -- the graph id, templates rendered
    kind      TEXT NOT NULL,      -- the file entry's id before expansion, e.g. detect-{pair}
    spec_hash TEXT NOT NULL,      -- hash of the command, environment, context, ...
    context   TEXT NOT NULL,      -- where it may run, after relabelling
    after     TEXT NOT NULL,      -- ids it runs after, as a JSON list
    state     TEXT NOT NULL,      -- pending | done | failed | cancelled
    run       INTEGER NOT NULL,   -- the run that last set the state
    message   TEXT                -- why it failed or was cancelled
);

-- One row per attempt to run an activity.
CREATE TABLE IF NOT EXISTS attempts (
    run          INTEGER NOT NULL REFERENCES runs(run),
    activity     TEXT NOT NULL REFERENCES activities(id),
    attempt      INTEGER NOT NULL,  -- 1, 2, ... within the run
    node         TEXT NOT NULL,     -- host name of the node that ran it
    executor     INTEGER NOT NULL,
    labels       TEXT NOT NULL,     -- the executor's contexts
    started      REAL NOT NULL,
    ended        REAL NOT NULL,
    outcome      TEXT NOT NULL,     -- exited | signalled | timed_out | start_failed
    exit_code    INTEGER,           -- for exited
    signal       INTEGER,           -- for signalled
    message      TEXT,              -- the outcome in words
    cpu_seconds  REAL,              -- user + system CPU of the command, where known
    stdout       TEXT,              -- file paths, NULL if not kept in a file, or if the
    stderr       TEXT,              --   command wrote nothing there (its empty file is removed)
    stdout_bytes INTEGER,
    stderr_bytes INTEGER,
    PRIMARY KEY (run, activity, attempt)
);
CREATE INDEX IF NOT EXISTS attempts_by_time ON attempts(run, started);
