-- Whole replays a session makes and judges together (`determinism`), so that a session read
-- back says how it was checked.
ALTER TABLE sessions ADD COLUMN determinism BIGINT;
