-- A session keeps its archive's name, so it still reads well after the archive is deleted.
ALTER TABLE sessions ADD COLUMN archive_name TEXT;
UPDATE sessions SET archive_name = (SELECT name FROM archives WHERE archives.id = sessions.archive);
CREATE INDEX sessions_by_archive ON sessions (archive);
