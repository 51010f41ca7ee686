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
    // The other names an archive's bytes were uploaded under (a duplicate upload keeps its name
    // here), in the order they came; removed with their archive.
    "CREATE TABLE archive_aliases (
        archive TEXT NOT NULL,
        name TEXT NOT NULL,
        UNIQUE (archive, name)
    );",
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
        aliases: Vec::new(),
        alias_added: None,
        note: None,
    })
}

/// `archives` with the other names each was uploaded under, in the order they came.
fn with_aliases(conn: &Connection, mut archives: Vec<ArchiveInfo>) -> Result<Vec<ArchiveInfo>, StoreError> {
    if archives.is_empty() {
        return Ok(archives);
    }
    // One archive's aliases alone when one is asked for; every alias for a listing.
    let only = (archives.len() == 1).then(|| archives[0].id.clone());
    let mut stmt = conn
        .prepare_cached("SELECT archive, name FROM archive_aliases WHERE ?1 IS NULL OR archive = ?1 ORDER BY rowid")?;
    let rows = stmt.query_map([only], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
    let mut by_id: std::collections::HashMap<String, Vec<String>> = Default::default();
    for row in rows {
        let (archive, name) = row?;
        by_id.entry(archive).or_default().push(name);
    }
    for a in &mut archives {
        a.aliases = by_id.remove(&a.id).unwrap_or_default();
    }
    Ok(archives)
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
        let conn = self.conn();
        let found = conn
            .query_row(&format!("SELECT {ARCHIVE_COLUMNS} FROM archives WHERE id = ?1"), [id], archive_row)
            .optional()?;
        Ok(with_aliases(&conn, found.into_iter().collect())?.pop())
    }

    fn archives(&self) -> Result<Vec<ArchiveInfo>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!("SELECT {ARCHIVE_COLUMNS} FROM archives ORDER BY rowid DESC"))?;
        let rows = stmt.query_map([], archive_row)?.collect::<Result<Vec<_>, _>>()?;
        with_aliases(&conn, rows)
    }

    fn add_alias(&self, id: &str, name: &str) -> Result<bool, StoreError> {
        // One statement on the one connection: the archive cannot go between the check and the insert.
        let n = self.conn().execute(
            "INSERT OR IGNORE INTO archive_aliases (archive, name) SELECT ?1, ?2 \
             WHERE EXISTS (SELECT 1 FROM archives WHERE id = ?1 AND name <> ?2)",
            params![id, name],
        )?;
        Ok(n == 1)
    }

    fn remove_archive(&self, id: &str) -> Result<Option<ArchiveInfo>, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let found = tx
            .query_row(&format!("SELECT {ARCHIVE_COLUMNS} FROM archives WHERE id = ?1"), [id], archive_row)
            .optional()?;
        let found = with_aliases(&tx, found.into_iter().collect())?.pop();
        if found.is_some() {
            tx.execute("DELETE FROM archives WHERE id = ?1", [id])?;
            tx.execute("DELETE FROM archive_aliases WHERE archive = ?1", [id])?;
        }
        tx.commit()?;
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
            aliases: Vec::new(),
            alias_added: None,
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

    #[test]
    fn aliases_are_kept_in_order_across_a_reopen_and_go_with_their_archive() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.sqlite");
        let index = SqliteIndex::open(&path).unwrap();
        let archive = |c: char, name: &str| ArchiveInfo {
            id: c.to_string().repeat(32),
            name: name.into(),
            size: 1,
            hash: c.to_string().repeat(64),
            ops: 1,
            kernels: 0,
            regions: 1,
            uploaded_at: "2026-01-01T00:00:00Z".into(),
            aliases: Vec::new(),
            alias_added: None,
            note: None,
        };
        let (a, b) = (archive('a', "first"), archive('b', "other"));
        assert!(index.put_archive(&a).unwrap() && index.put_archive(&b).unwrap());
        assert!(index.add_alias(&a.id, "second").unwrap());
        assert!(index.add_alias(&a.id, "third").unwrap());
        assert!(!index.add_alias(&a.id, "second").unwrap(), "a known alias is not added twice");
        assert!(!index.add_alias(&a.id, "first").unwrap(), "the archive's own name is no alias");
        assert!(!index.add_alias(&"c".repeat(32), "x").unwrap(), "no alias without its archive");
        drop(index);

        let index = SqliteIndex::open(&path).unwrap();
        let aliases = |index: &SqliteIndex| -> Vec<(String, Vec<String>)> {
            index.archives().unwrap().into_iter().map(|a| (a.name, a.aliases)).collect()
        };
        assert_eq!(
            aliases(&index),
            vec![("other".to_string(), vec![]), ("first".to_string(), vec!["second".to_string(), "third".to_string()])]
        );
        assert_eq!(index.archive(&a.id).unwrap().unwrap().aliases, ["second", "third"]);
        assert_eq!(index.remove_archive(&a.id).unwrap().unwrap().aliases, ["second", "third"]);
        assert!(index.put_archive(&a).unwrap());
        assert_eq!(index.archive(&a.id).unwrap().unwrap().aliases, Vec::<String>::new(), "removed with the archive");
    }
}
