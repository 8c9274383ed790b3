"""Migration 34: on PostgreSQL, the history tables become range partitions by time.

Each table is partitioned by week (Monday 00:00 UTC to the next), on a key that says when its
row's history began, so that a week's partition of one table holds exactly what belongs to that
week's partition of the others:

=====================  =================  ==========================================
table                  partition key      what the key is
=====================  =================  ==========================================
``transmission``       ``id``             the message's time-ordered id
``transmission_tag``   ``transmission_id``  its message's
``payload_chunk``      ``transmission_id``  its message's
``recipient``          ``id``             the record's time-ordered id
``event``              ``recipient_id``   its record's (events of a record stay with it)
``webhook_delivery``   ``id``             the delivery's time-ordered id
``webhook_attempt``    ``delivery_id``    its delivery's
``webhook_event``      ``created_at``     when the event was stored (epoch ms)
=====================  =================  ==========================================

A time-ordered id made at ``t`` sorts at or above ``id_floor(t)`` (``layang.db``), so a week is
the range ``[id_floor(monday), id_floor(next monday))``. The table as it was is kept whole, not
copied: it is renamed ``<table>_history`` and attached as the partition of everything before
the week after the one of its newest row or of today (``MINVALUE`` up to that Monday), so no
row moves and none is lost. Then come weekly partitions ``<table>_pYYYYMMDD`` (named by their
Monday) for that week and those that begin within 14 days (the workers make the following ones
ahead, ``layang.lifecycle.partitions``) and a ``<table>_default`` partition for any row outside
them (a clock far off), which retention ages row by row. Weeks, not days: every statement on a
partitioned table is planned over its partitions, and the delivery queue's claim, planned
hundreds of times a minute, grew by milliseconds with the 55 partitions 45 days would take.

PostgreSQL wants the partition key in every primary key: ``event``, ``webhook_attempt`` and
``webhook_event`` (keyed by their own serial or id before) now have ``(id, key)``; ids are still
unique, as their sequence or ``new_id`` makes them. Foreign keys between these tables are
dropped: detaching a partition that another table's key references makes PostgreSQL scan the
whole referencing table under an exclusive lock, which is the cost partitions are there to
avoid. The partitions are aligned instead (a record's events share its partition's range), and
whatever removes rows removes their dependants itself (``layang.lifecycle.retention``). Keys to
the tables that are not partitioned (``account``, ``webhook_endpoint``) stay.

SQLite keeps its tables as they are.
"""

from __future__ import annotations

from layang.migrations.dialect import SQLITE, Dialect

NAME = "history tables partitioned by week (PostgreSQL)"

_FUNCTIONS = [
    # Temporary: this migration's own arithmetic, gone with its session.
    """CREATE FUNCTION pg_temp.layang_id_floor(at_ms bigint) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    digits constant text := '0123456789abcdefghjkmnpqrstvwxyz';
    value bigint := at_ms;
    result text := '';
BEGIN
    FOR i IN 1..10 LOOP
        result := substr(digits, (value % 32)::int + 1, 1) || result;
        value := value / 32;
    END LOOP;
    RETURN result || '0000000000000000';
END $$""",
    """CREATE FUNCTION pg_temp.layang_id_ms(id text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    digits constant text := '0123456789abcdefghjkmnpqrstvwxyz';
    value bigint := 0;
BEGIN
    FOR i IN 1..10 LOOP
        value := value * 32 + greatest(strpos(digits, substr(lower(id), i, 1)) - 1, 0);
    END LOOP;
    RETURN value;
END $$""",
]

_CONVERT = """DO $$
DECLARE
    week_ms constant bigint := 604800000;
    monday constant bigint := 345600000;  -- 1970-01-05, the first Monday after the epoch
    ahead_ms constant bigint := 14 * 86400000;
    tables constant text[] := ARRAY['transmission', 'transmission_tag', 'payload_chunk',
        'recipient', 'event', 'webhook_delivery', 'webhook_attempt', 'webhook_event'];
    keys constant text[] := ARRAY['id', 'transmission_id', 'transmission_id', 'id',
        'recipient_id', 'id', 'delivery_id', 'created_at'];
    now_ms bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    cut_ms bigint;
    newest bigint;
    tbl text;
    key text;
    by_time boolean;
    pk_columns text;
    row record;
    saved_indexes text[];
    saved_triggers text[];
    saved_keys text[];
    statement text;
    week bigint;
    lo text;
    hi text;
BEGIN
    -- The first week not yet begun, nor holding any row.
    cut_ms := (now_ms - monday) / week_ms * week_ms + monday + week_ms;
    FOR i IN 1..array_length(tables, 1) LOOP
        IF keys[i] = 'created_at' THEN
            EXECUTE format('SELECT max(%I) FROM %I', keys[i], tables[i]) INTO newest;
        ELSE
            EXECUTE format('SELECT pg_temp.layang_id_ms(max(%I)) FROM %I', keys[i], tables[i])
                INTO newest;
        END IF;
        IF newest IS NOT NULL THEN
            cut_ms := greatest(cut_ms, (newest - monday) / week_ms * week_ms + monday + week_ms);
        END IF;
    END LOOP;

    -- Keys between the partitioned tables go (see above).
    FOR row IN
        SELECT c.conname, c.conrelid::regclass::text AS owner FROM pg_constraint c
        WHERE c.contype = 'f' AND c.conrelid::regclass::text = ANY(tables)
          AND c.confrelid::regclass::text = ANY(tables)
    LOOP
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', row.owner, row.conname);
    END LOOP;

    FOR i IN 1..array_length(tables, 1) LOOP
        tbl := tables[i];
        key := keys[i];
        by_time := key = 'created_at';
        SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.ord) INTO pk_columns
        FROM pg_constraint c, unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
        JOIN pg_attribute a ON a.attnum = k.attnum
        WHERE c.conrelid = tbl::regclass AND c.contype = 'p' AND a.attrelid = c.conrelid;
        saved_indexes := ARRAY(
            SELECT pg_get_indexdef(x.indexrelid) FROM pg_index x
            WHERE x.indrelid = tbl::regclass
              AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = x.indexrelid));
        saved_triggers := ARRAY(
            SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t
            WHERE t.tgrelid = tbl::regclass AND NOT t.tgisinternal);
        saved_keys := ARRAY(
            SELECT format('ALTER TABLE %I ADD CONSTRAINT %I %s', tbl, c.conname,
                          pg_get_constraintdef(c.oid))
            FROM pg_constraint c WHERE c.conrelid = tbl::regclass AND c.contype = 'f');

        -- The table as it is becomes the partition of its history.
        FOR row IN SELECT t.tgname FROM pg_trigger t
                   WHERE t.tgrelid = tbl::regclass AND NOT t.tgisinternal LOOP
            EXECUTE format('DROP TRIGGER %I ON %I', row.tgname, tbl);
        END LOOP;
        FOR row IN SELECT c.conname FROM pg_constraint c
                   WHERE c.conrelid = tbl::regclass AND c.contype = 'f' LOOP
            EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', tbl, row.conname);
        END LOOP;
        FOR row IN SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
                   WHERE x.indrelid = tbl::regclass
                     AND NOT EXISTS (SELECT 1 FROM pg_constraint k
                                     WHERE k.conindid = x.indexrelid) LOOP
            EXECUTE format('ALTER INDEX %I RENAME TO %I', row.relname, 'h_' || row.relname);
        END LOOP;
        IF pk_columns ~ ('(^|, )' || quote_ident(key) || '(,|$)') THEN
            EXECUTE format('ALTER TABLE %I RENAME CONSTRAINT %I TO %I',
                           tbl, tbl || '_pkey', tbl || '_history_pkey');
        ELSE
            EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', tbl, tbl || '_pkey');
            pk_columns := pk_columns || ', ' || quote_ident(key);
        END IF;
        EXECUTE format('ALTER TABLE %I RENAME TO %I', tbl, tbl || '_history');

        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS) PARTITION BY RANGE (%I)',
                       tbl, tbl || '_history', key);
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I PRIMARY KEY (%s)',
                       tbl, tbl || '_pkey', pk_columns);
        FOREACH statement IN ARRAY saved_indexes || saved_triggers || saved_keys LOOP
            EXECUTE statement;
        END LOOP;
        FOR row IN
            SELECT s.oid::regclass::text AS seq, a.attname FROM pg_depend d
            JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
            JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
            WHERE d.classid = 'pg_class'::regclass AND d.refobjid = (tbl || '_history')::regclass
              AND d.deptype = 'a'
        LOOP
            EXECUTE format('ALTER SEQUENCE %s OWNED BY %I.%I', row.seq, tbl, row.attname);
        END LOOP;

        hi := CASE WHEN by_time THEN cut_ms::text
                   ELSE quote_literal(pg_temp.layang_id_floor(cut_ms)) END;
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%s)',
                       tbl, tbl || '_history', hi);
        EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', tbl || '_default', tbl);
        week := cut_ms;
        WHILE week <= (now_ms + ahead_ms - monday) / week_ms * week_ms + monday LOOP
            lo := CASE WHEN by_time THEN week::text
                       ELSE quote_literal(pg_temp.layang_id_floor(week)) END;
            hi := CASE WHEN by_time THEN (week + week_ms)::text
                       ELSE quote_literal(pg_temp.layang_id_floor(week + week_ms)) END;
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%s) TO (%s)',
                           tbl || '_p' || to_char(to_timestamp(week / 1000) AT TIME ZONE 'UTC',
                                                  'YYYYMMDD'),
                           tbl, lo, hi);
            week := week + week_ms;
        END LOOP;
    END LOOP;
END $$"""


def statements(t: Dialect) -> list[str]:
    if t is SQLITE:
        return []
    written = [
        *_FUNCTIONS,
        _CONVERT,
        "DROP FUNCTION pg_temp.layang_id_floor(bigint)",
        "DROP FUNCTION pg_temp.layang_id_ms(text)",
    ]
    # The driver reads % as its parameter mark even without parameters: format()'s %I and %s
    # reach the server once doubled.
    return [statement.replace("%", "%%") for statement in written]
