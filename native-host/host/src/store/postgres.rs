//! The index in PostgreSQL (`--index postgres://USER@HOST:PORT/DB`): the SQLite index's tables
//! (store/sqlite.rs) for a team's database, shared by every replica of the host.
//!
//! Migrations are the `.sql` files of `migrations/postgres/`, applied in the order of their names,
//! each in a transaction with its row in `recap_migrations`; an advisory lock keeps two replicas
//! starting at once from applying one twice. Connections come from a small pool (deadpool) with
//! short timeouts, so that a database that does not answer makes API errors that say so within
//! seconds, and connections broken while it was away are replaced once it is back.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::runtime::Handle;
use tokio_postgres::Row;

use super::{ArchiveInfo, Event, Index, SessionInfo, SessionRecord, SessionState, StoreError};
use shared::protocol::SessionKind;

/// Every migration, by file name, in the order applied. Append only; never edit one that has
/// shipped. (A unit test checks this list against the folder.)
pub const MIGRATIONS: &[(&str, &str)] = &[
    ("0001_init.sql", include_str!("../../migrations/postgres/0001_init.sql")),
    ("0002_session_archive_name.sql", include_str!("../../migrations/postgres/0002_session_archive_name.sql")),
    ("0003_session_determinism.sql", include_str!("../../migrations/postgres/0003_session_determinism.sql")),
    ("0004_archive_aliases.sql", include_str!("../../migrations/postgres/0004_archive_aliases.sql")),
];

/// Connections kept open to the database.
const POOL_SIZE: usize = 8;
/// How long a request waits for a connection (or to make one) before it fails as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The index in a PostgreSQL database.
pub struct PgIndex {
    pool: Pool,
    /// The URL without its password, for messages.
    name: String,
    handle: Handle,
}

impl PgIndex {
    /// Connects to `url` (a libpq-style `postgres://` URL) and brings its schema up to date.
    /// Blocking: call it from a blocking thread of the runtime `handle` belongs to.
    pub fn open(url: &str, handle: Handle) -> Result<PgIndex, StoreError> {
        let name = crate::secrets::redact(url);
        let mut config: tokio_postgres::Config =
            url.parse().map_err(|e| StoreError::Config(format!("--index {name}: {e}")))?;
        config.connect_timeout(CONNECT_TIMEOUT);
        config.application_name("recap");
        let manager = Manager::from_config(
            config,
            tokio_postgres::NoTls,
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| StoreError::Config(format!("--index {name}: {e}")))?;
        let index = PgIndex { pool, name, handle };
        index.migrate()?;
        Ok(index)
    }

    fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.handle.block_on(f)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(|e| StoreError::Backend {
            what: format!("index {} unreachable", self.name),
            message: pool_error(&e),
            unreachable: true,
        })
    }

    /// An error of a query: unreachable when the connection broke under it.
    fn db(&self, e: tokio_postgres::Error) -> StoreError {
        let unreachable = e.is_closed() || std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>());
        let message = match e.as_db_error() {
            Some(db) => format!("{} ({})", db.message(), db.code().code()),
            None => e.to_string(),
        };
        StoreError::Backend {
            what: if unreachable { format!("index {} unreachable", self.name) } else { format!("index {}", self.name) },
            message,
            unreachable,
        }
    }

    fn migrate(&self) -> Result<(), StoreError> {
        self.block_on(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(|e| self.db(e))?;
            // One replica at a time; released when the transaction ends.
            tx.execute("SELECT pg_advisory_xact_lock(7243001)", &[]).await.map_err(|e| self.db(e))?;
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS recap_migrations (
                    name TEXT PRIMARY KEY,
                    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
                )",
            )
            .await
            .map_err(|e| self.db(e))?;
            let done: Vec<String> = tx
                .query("SELECT name FROM recap_migrations", &[])
                .await
                .map_err(|e| self.db(e))?
                .iter()
                .map(|r| r.get(0))
                .collect();
            if let Some(unknown) = done.iter().find(|d| !MIGRATIONS.iter().any(|(n, _)| n == d)) {
                return Err(StoreError::Corrupt(format!(
                    "index {}: migration {unknown} is newer than this recap knows ({} migrations)",
                    self.name,
                    MIGRATIONS.len()
                )));
            }
            for (name, sql) in MIGRATIONS {
                if done.iter().any(|d| d == name) {
                    continue;
                }
                tracing::info!(migration = name, index = self.name, "applying");
                tx.batch_execute(sql).await.map_err(|e| self.db(e))?;
                tx.execute("INSERT INTO recap_migrations (name) VALUES ($1)", &[name]).await.map_err(|e| self.db(e))?;
            }
            tx.commit().await.map_err(|e| self.db(e))
        })
    }
}

impl PgIndex {
    /// `archives` with the other names each was uploaded under, in the order they came.
    async fn with_aliases(
        &self,
        client: &deadpool_postgres::Object,
        mut archives: Vec<ArchiveInfo>,
    ) -> Result<Vec<ArchiveInfo>, StoreError> {
        if archives.is_empty() {
            return Ok(archives);
        }
        // One archive's aliases alone when one is asked for; every alias for a listing.
        let only = (archives.len() == 1).then(|| archives[0].id.clone());
        let rows = client
            .query(
                "SELECT archive, name FROM archive_aliases WHERE $1::TEXT IS NULL OR archive = $1 ORDER BY n",
                &[&only],
            )
            .await
            .map_err(|e| self.db(e))?;
        let mut by_id: std::collections::HashMap<String, Vec<String>> = Default::default();
        for row in &rows {
            by_id.entry(row.get(0)).or_default().push(row.get(1));
        }
        for a in &mut archives {
            a.aliases = by_id.remove(&a.id).unwrap_or_default();
        }
        Ok(archives)
    }
}

/// A pool error's cause, without the pool's own wording around it.
fn pool_error(e: &deadpool_postgres::PoolError) -> String {
    match e {
        deadpool_postgres::PoolError::Backend(e) => e.to_string(),
        deadpool_postgres::PoolError::Timeout(_) => {
            format!("no connection within {} s", CONNECT_TIMEOUT.as_secs())
        }
        other => other.to_string(),
    }
}

const ARCHIVE_COLUMNS: &str = "id, name, size, hash, ops, kernels, regions, uploaded_at";

fn archive_row(r: &Row) -> ArchiveInfo {
    ArchiveInfo {
        id: r.get(0),
        name: r.get(1),
        size: r.get::<_, i64>(2) as u64,
        hash: r.get(3),
        ops: r.get::<_, i64>(4) as u64,
        kernels: r.get::<_, i64>(5) as u64,
        regions: r.get::<_, i64>(6) as u64,
        uploaded_at: r.get(7),
        aliases: Vec::new(),
        alias_added: None,
        note: None,
    }
}

const SESSION_COLUMNS: &str =
    "id, archive, device, iterations, do_check, state, created_at, ended_at, passed, error, control_hash, budget, \
     time_limit_s, kind, compare_with, compare_all, compare_against, cuda_mode, archive_name, determinism";

fn session_row(r: &Row) -> Result<SessionRecord, StoreError> {
    let state: String = r.get(5);
    let state =
        SessionState::from_name(&state).ok_or_else(|| StoreError::Corrupt(format!("session state {state:?}")))?;
    let kind: String = r.get(13);
    let kind = SessionKind::from_name(&kind).ok_or_else(|| StoreError::Corrupt(format!("session kind {kind:?}")))?;
    Ok(SessionRecord {
        info: SessionInfo {
            id: r.get(0),
            archive: r.get(1),
            device: r.get(2),
            iterations: r.get::<_, i64>(3) as u32,
            check: r.get(4),
            state,
            created_at: r.get(6),
            ended_at: r.get(7),
            passed: r.get(8),
            check_state: shared::protocol::CheckState::of_stored(r.get(4), state, r.get(8)),
            error: r.get(9),
            budget: r.get::<_, Option<i64>>(11).map(|b| b as u64),
            time_limit_s: r.get::<_, Option<i64>>(12).map(|t| t as u64),
            kind,
            compare_with: r.get(14),
            compare_all: r.get(15),
            compare_against: r.get(16),
            cuda_mode: r.get(17),
            archive_name: r.get(18),
            determinism: r.get::<_, Option<i64>>(19).map(|n| n as u32),
        },
        control_hash: r.get(10),
    })
}

fn big(n: u64) -> i64 {
    n.min(i64::MAX as u64) as i64
}

impl Index for PgIndex {
    fn put_archive(&self, a: &ArchiveInfo) -> Result<bool, StoreError> {
        self.block_on(async {
            let client = self.client().await?;
            let n = client
                .execute(
                    &format!(
                        "INSERT INTO archives ({ARCHIVE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                         ON CONFLICT DO NOTHING"
                    ),
                    &[
                        &a.id,
                        &a.name,
                        &big(a.size),
                        &a.hash,
                        &big(a.ops),
                        &big(a.kernels),
                        &big(a.regions),
                        &a.uploaded_at,
                    ],
                )
                .await
                .map_err(|e| self.db(e))?;
            Ok(n == 1)
        })
    }

    fn archive(&self, id: &str) -> Result<Option<ArchiveInfo>, StoreError> {
        self.block_on(async {
            let client = self.client().await?;
            let row = client
                .query_opt(&format!("SELECT {ARCHIVE_COLUMNS} FROM archives WHERE id = $1"), &[&id])
                .await
                .map_err(|e| self.db(e))?;
            let found = row.as_ref().map(archive_row).into_iter().collect();
            Ok(self.with_aliases(&client, found).await?.pop())
        })
    }

    fn archives(&self) -> Result<Vec<ArchiveInfo>, StoreError> {
        self.block_on(async {
            let client = self.client().await?;
            let rows = client
                .query(&format!("SELECT {ARCHIVE_COLUMNS} FROM archives ORDER BY n DESC"), &[])
                .await
                .map_err(|e| self.db(e))?;
            self.with_aliases(&client, rows.iter().map(archive_row).collect()).await
        })
    }

    fn add_alias(&self, id: &str, name: &str) -> Result<bool, StoreError> {
        self.block_on(async {
            let client = self.client().await?;
            // The foreign key refuses an alias of an archive deleted meanwhile by another replica;
            // the condition leaves out one deleted before.
            let n = client
                .execute(
                    "INSERT INTO archive_aliases (archive, name) SELECT $1::TEXT, $2::TEXT \
                     WHERE EXISTS (SELECT 1 FROM archives WHERE id = $1 AND name <> $2) ON CONFLICT DO NOTHING",
                    &[&id, &name],
                )
                .await
                .map_err(|e| self.db(e))?;
            Ok(n == 1)
        })
    }

    fn remove_archive(&self, id: &str) -> Result<Option<ArchiveInfo>, StoreError> {
        self.block_on(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(|e| self.db(e))?;
            let aliases: Vec<String> = tx
                .query("SELECT name FROM archive_aliases WHERE archive = $1 ORDER BY n", &[&id])
                .await
                .map_err(|e| self.db(e))?
                .iter()
                .map(|r| r.get(0))
                .collect();
            // Its aliases go with it (ON DELETE CASCADE).
            let row = tx
                .query_opt(&format!("DELETE FROM archives WHERE id = $1 RETURNING {ARCHIVE_COLUMNS}"), &[&id])
                .await
                .map_err(|e| self.db(e))?;
            tx.commit().await.map_err(|e| self.db(e))?;
            Ok(row.as_ref().map(|r| ArchiveInfo { aliases, ..archive_row(r) }))
        })
    }

    fn put_session(&self, s: &SessionRecord, bindings: &[(String, Vec<u8>)]) -> Result<(), StoreError> {
        let i = &s.info;
        self.block_on(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(|e| self.db(e))?;
            tx.execute(
                &format!(
                    "INSERT INTO sessions ({SESSION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, \
                     $12, $13, $14, $15, $16, $17, $18, $19, $20)"
                ),
                &[
                    &i.id,
                    &i.archive,
                    &i.device,
                    &(i.iterations as i64),
                    &i.check,
                    &i.state.name(),
                    &i.created_at,
                    &i.ended_at,
                    &i.passed,
                    &i.error,
                    &s.control_hash,
                    &i.budget.map(big),
                    &i.time_limit_s.map(big),
                    &i.kind.name(),
                    &i.compare_with,
                    &i.compare_all,
                    &i.compare_against,
                    &i.cuda_mode,
                    &i.archive_name,
                    &i.determinism.map(i64::from),
                ],
            )
            .await
            .map_err(|e| self.db(e))?;
            for (name, bytes) in bindings {
                tx.execute(
                    "INSERT INTO session_bindings (session, name, bytes) VALUES ($1, $2, $3)",
                    &[&i.id, name, bytes],
                )
                .await
                .map_err(|e| self.db(e))?;
            }
            tx.commit().await.map_err(|e| self.db(e))
        })
    }

    fn bindings(&self, session: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.block_on(async {
            let client = self.client().await?;
            let rows = client
                .query("SELECT name, bytes FROM session_bindings WHERE session = $1 ORDER BY name", &[&session])
                .await
                .map_err(|e| self.db(e))?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })
    }

    fn update_session(&self, i: &SessionInfo) -> Result<(), StoreError> {
        self.block_on(async {
            let client = self.client().await?;
            client
                .execute(
                    "UPDATE sessions SET state = $2, ended_at = $3, passed = $4, error = $5 WHERE id = $1",
                    &[&i.id, &i.state.name(), &i.ended_at, &i.passed, &i.error],
                )
                .await
                .map_err(|e| self.db(e))?;
            Ok(())
        })
    }

    fn save_session(&self, info: &SessionInfo, events: &[Event]) -> Result<(), StoreError> {
        let mut lines = Vec::with_capacity(events.len());
        for e in events {
            lines.push((e.seq as i64, serde_json::to_string(e).map_err(|e| StoreError::Corrupt(e.to_string()))?));
        }
        self.block_on(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(|e| self.db(e))?;
            tx.execute("DELETE FROM events WHERE session = $1", &[&info.id]).await.map_err(|e| self.db(e))?;
            // One statement for the whole log: a long one is one round trip, not thousands.
            let seqs: Vec<i64> = lines.iter().map(|(s, _)| *s).collect();
            let jsons: Vec<&str> = lines.iter().map(|(_, j)| j.as_str()).collect();
            tx.execute(
                "INSERT INTO events (session, seq, json) SELECT $1, * FROM unnest($2::BIGINT[], $3::TEXT[])",
                &[&info.id, &seqs, &jsons],
            )
            .await
            .map_err(|e| self.db(e))?;
            tx.execute(
                "UPDATE sessions SET state = $2, ended_at = $3, passed = $4, error = $5 WHERE id = $1",
                &[&info.id, &info.state.name(), &info.ended_at, &info.passed, &info.error],
            )
            .await
            .map_err(|e| self.db(e))?;
            if info.state.is_terminal() {
                tx.execute("DELETE FROM session_bindings WHERE session = $1", &[&info.id])
                    .await
                    .map_err(|e| self.db(e))?;
            }
            tx.commit().await.map_err(|e| self.db(e))
        })
    }

    fn session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        self.block_on(async {
            let client = self.client().await?;
            let row = client
                .query_opt(&format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1"), &[&id])
                .await
                .map_err(|e| self.db(e))?;
            row.as_ref().map(session_row).transpose()
        })
    }

    fn sessions(&self, limit: usize, archive: Option<&str>) -> Result<Vec<SessionInfo>, StoreError> {
        self.block_on(async {
            let client = self.client().await?;
            let rows = client
                .query(
                    &format!(
                        "SELECT {SESSION_COLUMNS} FROM sessions WHERE $2::TEXT IS NULL OR archive = $2 \
                         ORDER BY n DESC LIMIT $1"
                    ),
                    &[&(limit as i64), &archive],
                )
                .await
                .map_err(|e| self.db(e))?;
            rows.iter().map(|r| session_row(r).map(|s| s.info)).collect()
        })
    }

    fn events(&self, session: &str) -> Result<Vec<Event>, StoreError> {
        self.block_on(async {
            let client = self.client().await?;
            let rows = client
                .query("SELECT json FROM events WHERE session = $1 ORDER BY seq", &[&session])
                .await
                .map_err(|e| self.db(e))?;
            rows.iter()
                .map(|r| {
                    serde_json::from_str(r.get::<_, &str>(0))
                        .map_err(|e| StoreError::Corrupt(format!("event of session {session}: {e}")))
                })
                .collect()
        })
    }

    fn unfinished(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.block_on(async {
            let client = self.client().await?;
            let rows = client
                .query(
                    &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE state IN ('queued', 'running') ORDER BY n"),
                    &[],
                )
                .await
                .map_err(|e| self.db(e))?;
            rows.iter().map(session_row).collect()
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_migration_file_is_applied_in_name_order() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/postgres");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sql"))
            .collect();
        files.sort();
        let listed: Vec<&str> = super::MIGRATIONS.iter().map(|(n, _)| *n).collect();
        assert_eq!(files, listed, "migrations/postgres/ and MIGRATIONS disagree");
    }
}
