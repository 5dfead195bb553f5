-- The run journal, schema version 2. One database per graph run; a resumed
-- run adds rows to the same database. Times are Unix seconds (REAL), so
-- `datetime(started, 'unixepoch')` prints them in sqlite3.
--
-- Version 2 keeps a million activities in about a hundred bytes each:
-- names that repeat (kinds, contexts, executors) are stored once and
-- referred to by number, the graph is stored as the files it was read
-- from rather than expanded, and attempts carry no index but their key.
-- The views at the end join the names back for reading with sqlite3:
--   SELECT * FROM attempt_list WHERE outcome <> 'exited' OR exit_code <> 0;

-- Key-value facts about the database itself: schema_version.
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- One row per run of the graph: the first run is 1, each resume adds one.
CREATE TABLE IF NOT EXISTS runs (
    run          INTEGER PRIMARY KEY,
    graph_path   TEXT NOT NULL,   -- the graph file as given
    graph_hash   TEXT NOT NULL,   -- hash of what the run ran (the graph and its sweep files)
    started      REAL NOT NULL,
    ended        REAL,            -- NULL while running, or if the runner was killed
    status       TEXT NOT NULL,   -- running | succeeded | failed | interrupted
    host         TEXT NOT NULL,   -- where the runner ran
    command_line TEXT NOT NULL,
    output_dir   TEXT NOT NULL    -- where this run's stdout/stderr files go
);

-- The files a run's graph was read from, once per run: the graph file and
-- each sweep's values file, as read. Together with the run's command line
-- (relabelling, context file) they give the graph the run ran.
CREATE TABLE IF NOT EXISTS run_sources (
    run  INTEGER NOT NULL REFERENCES runs(run),
    name TEXT NOT NULL,           -- the file's path as the graph names it
    text TEXT NOT NULL,           -- its contents; for a job's run, whose files the pool node
                                  --   keeps in STATE/jobs/ID/, 'kept in the job's folder by
                                  --   the pool node; sha256 HEX' (the digest of the contents)
    PRIMARY KEY (run, name)
);

-- Activity kinds: the graph file's entries by id before sweep expansion,
-- numbered in the order graphs first declared them (graph order).
CREATE TABLE IF NOT EXISTS kinds (
    kind INTEGER PRIMARY KEY,     -- the number activities refer to
    name TEXT NOT NULL UNIQUE     -- the entry's id as written, e.g. detect-{pair}
);

-- The distinct contexts activities may run in, after relabelling.
CREATE TABLE IF NOT EXISTS contexts (
    context INTEGER PRIMARY KEY,  -- the number activities refer to
    text    TEXT NOT NULL UNIQUE  -- the context list as text, e.g. gpu>cpu
);

-- The executors of each run, and any other executor an attempt ran on
-- (an agent that joined the pool later, or one whose labels changed).
CREATE TABLE IF NOT EXISTS executors (
    slot     INTEGER PRIMARY KEY, -- the number attempts refer to
    run      INTEGER NOT NULL REFERENCES runs(run),
    node     TEXT NOT NULL,       -- the node's host name
    executor INTEGER NOT NULL,    -- index within its node
    labels   TEXT NOT NULL,       -- its contexts, comma separated, in priority order
    cores    INTEGER,             -- cores it may use (threads it runs on); NULL for an
                                  --   executor the run did not list, known from attempts only
    UNIQUE (run, node, executor, labels)
);

-- One row per activity of the graph, as it stands after the latest run.
CREATE TABLE IF NOT EXISTS activities (
    activity  INTEGER PRIMARY KEY, -- the number attempts refer to
    id        TEXT NOT NULL,       -- the graph id, templates rendered (unique: see below)
    kind      INTEGER NOT NULL REFERENCES kinds(kind),
    context   INTEGER NOT NULL REFERENCES contexts(context), -- where it may run
    spec_hash INTEGER NOT NULL,    -- 64-bit hash of the command, environment, context,
                                   --   retries, files and `after` texts (a resume compares it)
    state     TEXT NOT NULL,       -- pending | done | failed | cancelled
    run       INTEGER NOT NULL,    -- the run that last set the state
    message   TEXT                 -- why it failed or was cancelled
);

-- Ids are unique. The index is a table of its own so that a first run's
-- declaration can build it once, sorted, after its rows are in.
CREATE UNIQUE INDEX IF NOT EXISTS activities_by_id ON activities(id);

-- One row per attempt to run an activity.
CREATE TABLE IF NOT EXISTS attempts (
    run           INTEGER NOT NULL REFERENCES runs(run),
    activity      INTEGER NOT NULL REFERENCES activities(activity),
    attempt       INTEGER NOT NULL,  -- 1, 2, ... within the run, over all its executions
    slot          INTEGER NOT NULL REFERENCES executors(slot), -- the executor that ran it
    started       REAL NOT NULL,
    ended         REAL NOT NULL,
    outcome       TEXT NOT NULL,     -- exited | signalled | timed_out | start_failed | lost
                                     --   (lost: its node died or left before it reported;
                                     --   ended is when that was noticed)
    exit_code     INTEGER,           -- for exited
    signal        INTEGER,           -- for signalled
    message       TEXT,              -- the outcome in words; 'extra execution...' for an
                                     --   execution after its activity had settled
    cpu_seconds   REAL,              -- user + system CPU of the command, where known
    stdout        TEXT,              -- file paths, NULL if not kept in a file of its own, or
    stderr        TEXT,              --   if the command wrote nothing there (no file is left)
    stdout_bytes  INTEGER,
    stderr_bytes  INTEGER,
    stream        TEXT,              -- the run's stream file holding the attempt's output,
                                     --   NULL unless the run streamed output
    stream_offset INTEGER,           -- where the attempt's output starts in it, in bytes
    stream_length INTEGER,           -- how many bytes of it are the attempt's
    PRIMARY KEY (run, activity, attempt)
) WITHOUT ROWID;

-- Activities with their kind and context by name, and spec hash in hex.
CREATE VIEW IF NOT EXISTS activity_list AS
    SELECT a.activity, a.id, k.name AS kind, c.text AS context,
           printf('%016x', a.spec_hash) AS spec_hash, a.state, a.run, a.message
    FROM activities a
    JOIN kinds k ON k.kind = a.kind
    JOIN contexts c ON c.context = a.context;

-- Attempts with the activity's id and kind and the executor's node,
-- index and labels, in start order.
CREATE VIEW IF NOT EXISTS attempt_list AS
    SELECT t.run, a.id AS activity, k.name AS kind, t.attempt, e.node, e.executor, e.labels,
           t.started, t.ended, t.ended - t.started AS seconds, t.outcome, t.exit_code,
           t.signal, t.message, t.cpu_seconds, t.stdout, t.stderr, t.stdout_bytes,
           t.stderr_bytes, t.stream, t.stream_offset, t.stream_length
    FROM attempts t
    JOIN activities a ON a.activity = t.activity
    JOIN kinds k ON k.kind = a.kind
    JOIN executors e ON e.slot = t.slot
    ORDER BY t.run, t.started;
