//! The index in one SQLite file, schema evolved by numbered migrations (`PRAGMA user_version`).

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::{ArchiveInfo, Event, Index, SessionInfo, SessionRecord, SessionState, StoreError};
use shared::protocol::SessionKind;

/// Migration `n` (1-based) brings `user_version` from `n - 1` to `n`. Append only; never edit one
/// that has shipped.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE archives (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        size INTEGER NOT NULL,
        hash TEXT NOT NULL UNIQUE,
        ops INTEGER NOT NULL,
        kernels INTEGER NOT NULL,
        regions INTEGER NOT NULL,
        uploaded_at TEXT NOT NULL
    );
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        archive TEXT NOT NULL,
        device TEXT NOT NULL,
        iterations INTEGER NOT NULL,
        do_check INTEGER NOT NULL,
        state TEXT NOT NULL,
        created_at TEXT NOT NULL,
        ended_at TEXT,
        passed INTEGER,
        error TEXT,
        control_hash TEXT NOT NULL
    );
    CREATE TABLE events (
        session TEXT NOT NULL,
        seq INTEGER NOT NULL,
        json TEXT NOT NULL,
        PRIMARY KEY (session, seq)
    ) WITHOUT ROWID;",
    // What a queued session needs to run after a restart besides its row: the bytes of its bindings
    // (dropped once the session ends).
    "CREATE TABLE session_bindings (
        session TEXT NOT NULL,
        name TEXT NOT NULL,
        bytes BLOB NOT NULL,
        UNIQUE (session, name)
    );",
    // The limits a session was settled with, so that one queued across a restart keeps them.
    "ALTER TABLE sessions ADD COLUMN budget INTEGER;
    ALTER TABLE sessions ADD COLUMN time_limit_s INTEGER;",
    // Comparison sessions: what they are and their second side.
    "ALTER TABLE sessions ADD COLUMN kind TEXT NOT NULL DEFAULT 'replay';
    ALTER TABLE sessions ADD COLUMN compare_with TEXT;
    ALTER TABLE sessions ADD COLUMN compare_all INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN compare_against TEXT;
    ALTER TABLE sessions ADD COLUMN cuda_mode TEXT;",
    // The archive's name with each session, so that the list and the session page still name it
    // after the archive is deleted.
    "ALTER TABLE sessions ADD COLUMN archive_name TEXT;
    UPDATE sessions SET archive_name = (SELECT name FROM archives WHERE archives.id = sessions.archive);",
    // Whole replays a session makes and judges together, so that one read back says how it was
    // checked.
    "ALTER TABLE sessions ADD COLUMN determinism INTEGER;",
];

/// The index of one machine.
pub struct SqliteIndex {
    conn: Mutex<Connection>,
}

impl SqliteIndex {
    pub fn open(path: &Path) -> Result<SqliteIndex, StoreError> {
        let mut conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        migrate(&mut conn)?;
        Ok(SqliteIndex { conn: Mutex::new(conn) })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let version: usize = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version > MIGRATIONS.len() {
        return Err(StoreError::Corrupt(format!(
            "schema version {version} is newer than this recap knows ({})",
            MIGRATIONS.len()
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", i + 1)?;
        tx.commit()?;
    }
    Ok(())
}

const ARCHIVE_COLUMNS: &str = "id, name, size, hash, ops, kernels, regions, uploaded_at";

fn archive_row(r: &Row<'_>) -> rusqlite::Result<ArchiveInfo> {
    Ok(ArchiveInfo {
        id: r.get(0)?,
        name: r.get(1)?,
        size: r.get::<_, i64>(2)? as u64,
        hash: r.get(3)?,
        ops: r.get::<_, i64>(4)? as u64,
        kernels: r.get::<_, i64>(5)? as u64,
        regions: r.get::<_, i64>(6)? as u64,
        uploaded_at: r.get(7)?,
        note: None,
    })
}

const SESSION_COLUMNS: &str =
    "id, archive, device, iterations, do_check, state, created_at, ended_at, passed, error, control_hash, budget, \
     time_limit_s, kind, compare_with, compare_all, compare_against, cuda_mode, archive_name, determinism";

fn session_row(r: &Row<'_>) -> rusqlite::Result<SessionRecord> {
    let state: String = r.get(5)?;
    let state = SessionState::from_name(&state).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(5, rusqlite::types::Type::Text, format!("state {state}").into())
    })?;
    let kind: String = r.get(13)?;
    let kind = SessionKind::from_name(&kind).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(13, rusqlite::types::Type::Text, format!("kind {kind}").into())
    })?;
    Ok(SessionRecord {
        info: SessionInfo {
            id: r.get(0)?,
            archive: r.get(1)?,
            archive_name: r.get(18)?,
            device: r.get(2)?,
            iterations: r.get(3)?,
            check: r.get(4)?,
            state,
            created_at: r.get(6)?,
            ended_at: r.get(7)?,
            passed: r.get(8)?,
            check_state: shared::protocol::CheckState::of_stored(r.get(4)?, state, r.get(8)?),
            error: r.get(9)?,
            budget: r.get::<_, Option<i64>>(11)?.map(|b| b as u64),
            time_limit_s: r.get::<_, Option<i64>>(12)?.map(|t| t as u64),
            kind,
            compare_with: r.get(14)?,
            compare_all: r.get(15)?,
            compare_against: r.get(16)?,
            cuda_mode: r.get(17)?,
            determinism: r.get(19)?,
        },
        control_hash: r.get(10)?,
    })
}

impl Index for SqliteIndex {
    fn put_archive(&self, a: &ArchiveInfo) -> Result<bool, StoreError> {
        let n = self.conn().execute(
            &format!("INSERT OR IGNORE INTO archives ({ARCHIVE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"),
            params![
                a.id,
                a.name,
                a.size as i64,
                a.hash,
                a.ops as i64,
                a.kernels as i64,
                a.regions as i64,
                a.uploaded_at
            ],
        )?;
        Ok(n == 1)
    }

    fn archive(&self, id: &str) -> Result<Option<ArchiveInfo>, StoreError> {
        Ok(self
            .conn()
            .query_row(&format!("SELECT {ARCHIVE_COLUMNS} FROM archives WHERE id = ?1"), [id], archive_row)
            .optional()?)
    }

    fn archives(&self) -> Result<Vec<ArchiveInfo>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!("SELECT {ARCHIVE_COLUMNS} FROM archives ORDER BY rowid DESC"))?;
        let rows = stmt.query_map([], archive_row)?.collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    fn remove_archive(&self, id: &str) -> Result<Option<ArchiveInfo>, StoreError> {
        let conn = self.conn();
        let found = conn
            .query_row(&format!("SELECT {ARCHIVE_COLUMNS} FROM archives WHERE id = ?1"), [id], archive_row)
            .optional()?;
        if found.is_some() {
            conn.execute("DELETE FROM archives WHERE id = ?1", [id])?;
        }
        Ok(found)
    }

    fn put_session(&self, s: &SessionRecord, bindings: &[(String, Vec<u8>)]) -> Result<(), StoreError> {
        let i = &s.info;
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            &format!("INSERT INTO sessions ({SESSION_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)"),
            params![
                i.id,
                i.archive,
                i.device,
                i.iterations,
                i.check,
                i.state.name(),
                i.created_at,
                i.ended_at,
                i.passed,
                i.error,
                s.control_hash,
                i.budget.map(|b| b.min(i64::MAX as u64) as i64),
                i.time_limit_s.map(|t| t.min(i64::MAX as u64) as i64),
                i.kind.name(),
                i.compare_with,
                i.compare_all,
                i.compare_against,
                i.cuda_mode,
                i.archive_name,
                i.determinism
            ],
        )?;
        for (name, bytes) in bindings {
            tx.execute(
                "INSERT INTO session_bindings (session, name, bytes) VALUES (?1, ?2, ?3)",
                params![i.id, name, bytes],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    fn bindings(&self, session: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT name, bytes FROM session_bindings WHERE session = ?1 ORDER BY name")?;
        let rows = stmt.query_map([session], |r| Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?)))?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    fn update_session(&self, i: &SessionInfo) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE sessions SET state = ?2, ended_at = ?3, passed = ?4, error = ?5 WHERE id = ?1",
            params![i.id, i.state.name(), i.ended_at, i.passed, i.error],
        )?;
        Ok(())
    }

    fn session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        Ok(self
            .conn()
            .query_row(&format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1"), [id], session_row)
            .optional()?)
    }

    fn sessions(&self, limit: usize, archive: Option<&str>) -> Result<Vec<SessionInfo>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE ?2 IS NULL OR archive = ?2 ORDER BY rowid DESC LIMIT ?1"
        ))?;
        let rows = stmt.query_map(params![limit as i64, archive], session_row)?.map(|r| r.map(|s| s.info));
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    fn save_session(&self, info: &SessionInfo, events: &[Event]) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute("DELETE FROM events WHERE session = ?1", [&info.id])?;
        {
            let mut stmt = tx.prepare_cached("INSERT INTO events (session, seq, json) VALUES (?1, ?2, ?3)")?;
            for e in events {
                let json = serde_json::to_string(e).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                stmt.execute(params![info.id, e.seq as i64, json])?;
            }
        }
        tx.execute(
            "UPDATE sessions SET state = ?2, ended_at = ?3, passed = ?4, error = ?5 WHERE id = ?1",
            params![info.id, info.state.name(), info.ended_at, info.passed, info.error],
        )?;
        if info.state.is_terminal() {
            tx.execute("DELETE FROM session_bindings WHERE session = ?1", [&info.id])?;
        }
        tx.commit()?;
        Ok(())
    }

    fn events(&self, session: &str) -> Result<Vec<Event>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT seq, json FROM events WHERE session = ?1 ORDER BY seq")?;
        let rows = stmt.query_map([session], |r| r.get::<_, String>(1))?;
        let mut out = Vec::new();
        for json in rows {
            let json = json?;
            out.push(
                serde_json::from_str(&json)
                    .map_err(|e| StoreError::Corrupt(format!("event of session {session}: {e}")))?,
            );
        }
        Ok(out)
    }

    fn unfinished(&self) -> Result<Vec<SessionRecord>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE state IN ('queued', 'running') ORDER BY rowid"
        ))?;
        let rows = stmt.query_map([], session_row)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_run_once_and_reopen_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.sqlite");
        let index = SqliteIndex::open(&path).unwrap();
        let a = ArchiveInfo {
            id: "a".repeat(32),
            name: "x".into(),
            size: 1,
            hash: "a".repeat(64),
            ops: 1,
            kernels: 0,
            regions: 1,
            uploaded_at: "2026-01-01T00:00:00Z".into(),
            note: None,
        };
        assert!(index.put_archive(&a).unwrap());
        assert!(!index.put_archive(&a).unwrap());
        drop(index);
        let index = SqliteIndex::open(&path).unwrap();
        assert_eq!(index.archives().unwrap(), vec![a]);
        let version: usize = index.conn().pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        assert_eq!(version, MIGRATIONS.len());
    }
}
