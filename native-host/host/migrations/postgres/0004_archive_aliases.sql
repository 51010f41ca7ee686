-- The other names an archive's bytes were uploaded under (a duplicate upload keeps its name here),
-- in the order they came (`n`); removed with their archive.
CREATE TABLE archive_aliases (
    n BIGSERIAL NOT NULL,
    archive TEXT NOT NULL REFERENCES archives (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    UNIQUE (archive, name)
);
