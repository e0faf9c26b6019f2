"""The SQL of the PostgreSQL store and outbox: table names and statements, no I/O.

Every name comes from one ``prefix`` (default ``rabbitq_``, checked by
:func:`~rabbitq.effects.location.check_prefix`), so that tests and several services can
share a database. The schema is created on first use (``open()``) and by
``rabbitq effects init MODULE:APP``; both are idempotent and serialised by an advisory
lock, as concurrent ``CREATE TABLE IF NOT EXISTS`` can fail in PostgreSQL.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from psycopg import sql


def lock_id(name: str) -> int:
    """A stable advisory lock id (a signed 32-bit int) for ``name``."""
    return zlib.crc32(name.encode()) - 2**31


@dataclass(frozen=True, slots=True)
class KeysSql:
    """The statements of the idempotency keys table ``<prefix>idempotency``."""

    table: str

    def create(self) -> list[sql.Composed]:
        t = sql.Identifier(self.table)
        index = sql.Identifier(self.table + "_expires")
        return [
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} ("
                " key text PRIMARY KEY,"
                " state text NOT NULL CHECK (state IN ('busy', 'done')),"
                " token text NOT NULL,"
                " expires_at timestamptz NOT NULL)"
            ).format(t),
            # Cleanup reads expired keys through this index, never by a table scan.
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (expires_at)").format(index, t),
        ]

    def claim(self) -> sql.Composed:
        # One round trip: take the key if it is absent or its lease/retention expired;
        # otherwise report the state found. A row committed after this statement's
        # snapshot is invisible to the outer SELECT: no row then reads as busy.
        t = sql.Identifier(self.table)
        return sql.SQL(
            "WITH taken AS ("
            " INSERT INTO {t} AS k (key, state, token, expires_at)"
            " VALUES (%(key)s, 'busy', %(token)s, now() + make_interval(secs => %(lease)s))"
            " ON CONFLICT (key) DO UPDATE SET state = 'busy', token = excluded.token,"
            "  expires_at = excluded.expires_at WHERE k.expires_at < now()"
            " RETURNING 'new'::text AS state)"
            " SELECT state FROM taken"
            " UNION ALL SELECT state FROM {t}"
            " WHERE key = %(key)s AND NOT EXISTS (SELECT 1 FROM taken)"
        ).format(t=t)

    def claim_many(self) -> sql.Composed:
        # The claims of one batch in one statement (group commit): %(batch)s is a JSON
        # array of {key, token, lease}, the keys distinct (one parameter: psycopg dumps
        # arrays element by element in Python, several times slower). Each key is taken if absent or
        # expired, as by claim(); rows are inserted and locked in key order, so that two
        # workers' batches never wait on each other in a cycle. Answers (key, state,
        # token) in any order: 'new', else the state and token found (none: committed
        # after the snapshot, busy). Sent again after a cut, it finds its own tokens.
        t = sql.Identifier(self.table)
        return sql.SQL(
            "WITH input AS (SELECT * FROM json_to_recordset(%(batch)s::json)"
            "  AS i(key text, token text, lease float8)),"
            " taken AS ("
            " INSERT INTO {t} AS k (key, state, token, expires_at)"
            " SELECT key, 'busy', token, now() + make_interval(secs => lease)"
            "  FROM input ORDER BY key"
            " ON CONFLICT (key) DO UPDATE SET state = 'busy', token = excluded.token,"
            "  expires_at = excluded.expires_at WHERE k.expires_at < now()"
            " RETURNING k.key)"
            " SELECT i.key, CASE WHEN taken.key IS NOT NULL THEN 'new' ELSE k.state END,"
            " k.token"
            " FROM input i LEFT JOIN taken ON taken.key = i.key"
            " LEFT JOIN {t} k ON k.key = i.key"
        ).format(t=t)

    def _held(self, states: str) -> sql.Composed:
        # The rows of a batch's {key, token} (%(batch)s, JSON) still held by those tokens in one of
        # ``states``, locked in key order (see claim_many).
        return sql.SQL(
            "(SELECT t.key FROM {t} t"
            " JOIN json_to_recordset(%(batch)s::json) AS i(key text, token text)"
            "  ON t.key = i.key AND t.token = i.token"
            " WHERE t.state IN ({states}) ORDER BY t.key FOR UPDATE OF t) AS held"
        ).format(t=sql.Identifier(self.table), states=sql.SQL(states))

    def done_many(self) -> sql.Composed:
        # The done marks of one batch in one statement: the tokens whose lease was held.
        # A row already done by the same token (this statement sent again after a cut)
        # counts as held: only that token's claim can have marked it.
        return sql.SQL(
            "UPDATE {t} AS k SET state = 'done',"
            " expires_at = now() + make_interval(secs => %(keep)s)"
            " FROM {held} WHERE k.key = held.key RETURNING k.token"
        ).format(t=sql.Identifier(self.table), held=self._held("'busy', 'done'"))

    def renew_many(self) -> sql.Composed:
        # A heartbeat: the leases of a batch's {key, token, ttl} still held by those
        # tokens, extended to now + ttl; answers the tokens held.
        return sql.SQL(
            "UPDATE {t} AS k SET expires_at = now() + make_interval(secs => i.ttl)"
            " FROM {held}, json_to_recordset(%(batch)s::json) AS i(key text, ttl float8)"
            " WHERE k.key = held.key AND i.key = held.key RETURNING k.token"
        ).format(t=sql.Identifier(self.table), held=self._held("'busy'"))

    def release_many(self) -> sql.Composed:
        # The releases of one batch in one statement: leases only, never a done key.
        return sql.SQL("DELETE FROM {t} AS k USING {held} WHERE k.key = held.key").format(
            t=sql.Identifier(self.table), held=self._held("'busy'")
        )

    def done(self) -> sql.Composed:
        return sql.SQL(
            "UPDATE {} SET state = 'done', expires_at = now() + make_interval(secs => %(keep)s)"
            " WHERE key = %(key)s AND token = %(token)s AND state = 'busy'"
        ).format(sql.Identifier(self.table))

    def commit_done(self, key: str, token: str, keep: float) -> sql.Composed:
        # A transactional handler's done mark and its COMMIT, in one round trip: without
        # parameters (the values are sql.Literal, quoted by psycopg) psycopg sends it by
        # the simple query protocol, which runs both. A mark that finds no lease of this
        # token divides by zero: the error aborts the transaction before its COMMIT runs,
        # and the store reads it as the lease lost (LeaseLost).
        return sql.SQL(
            "WITH marked AS (UPDATE {t} SET state = 'done',"
            " expires_at = now() + make_interval(secs => {keep})"
            " WHERE key = {key} AND token = {token} AND state = 'busy' RETURNING 1)"
            " SELECT 1 / count(*) FROM marked; COMMIT"
        ).format(
            t=sql.Identifier(self.table),
            key=sql.Literal(key),
            token=sql.Literal(token),
            keep=sql.Literal(keep),
        )

    def release(self) -> sql.Composed:
        return sql.SQL(
            "DELETE FROM {} WHERE key = %(key)s AND token = %(token)s AND state = 'busy'"
        ).format(sql.Identifier(self.table))

    def cleanup(self) -> sql.Composed:
        # A bounded batch through the expires_at index; SKIP LOCKED leaves rows that a
        # claim is taking over right now.
        t = sql.Identifier(self.table)
        return sql.SQL(
            "DELETE FROM {t} WHERE key IN (SELECT key FROM {t} WHERE expires_at < now()"
            " ORDER BY expires_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)"
        ).format(t=t)

    def drop(self) -> sql.Composed:
        return sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(self.table))


@dataclass(frozen=True, slots=True)
class OutboxSql:
    """The statements of the outbox table ``<prefix>outbox``."""

    table: str

    def create(self) -> list[sql.Composed]:
        t = sql.Identifier(self.table)
        pending = sql.Identifier(self.table + "_pending")
        sent = sql.Identifier(self.table + "_sent")
        waiting = sql.Identifier(self.table + "_waiting")
        return [
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} ("
                " id bigserial PRIMARY KEY,"
                " exchange text NOT NULL,"
                " routing_key text NOT NULL,"
                " message_id text NOT NULL,"
                " type text NOT NULL,"
                " body bytea NOT NULL,"
                " headers jsonb,"
                " correlation_id text,"
                " order_key text,"
                " created_at timestamptz NOT NULL DEFAULT now(),"
                " sent_at timestamptz)"
            ).format(t),
            # The relay and the metrics read pending rows only, through this partial index.
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {} ON {} (id) INCLUDE (created_at)"
                " WHERE sent_at IS NULL"
            ).format(pending, t),
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {} ON {} (sent_at) WHERE sent_at IS NOT NULL"
            ).format(sent, t),
            # A row that failed waits until next_attempt_at (its own backoff); added to
            # tables made before these columns existed, so a deployed outbox upgrades.
            sql.SQL(
                "ALTER TABLE {} ADD COLUMN IF NOT EXISTS attempts int NOT NULL DEFAULT 0,"
                " ADD COLUMN IF NOT EXISTS next_attempt_at timestamptz,"
                " ADD COLUMN IF NOT EXISTS last_error text"
            ).format(t),
            # The rows in backoff, by key: what holds back the later rows of a key.
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {} ON {} (order_key, id)"
                " WHERE sent_at IS NULL AND next_attempt_at IS NOT NULL"
            ).format(waiting, t),
        ]

    def insert(self) -> sql.Composed:
        return sql.SQL(
            "INSERT INTO {} (exchange, routing_key, message_id, type, body, headers,"
            " correlation_id, order_key) VALUES (%(exchange)s, %(routing_key)s,"
            " %(message_id)s, %(type)s, %(body)s, %(headers)s, %(correlation_id)s,"
            " %(order_key)s)"
        ).format(sql.Identifier(self.table))

    def pending(self) -> sql.Composed:
        # The rows due now, oldest first: not in their own backoff, and not behind a row
        # of their key that is (it must go first). Rows in backoff are skipped, so a
        # batch's worth of failing rows never holds back the rows after them.
        return sql.SQL(
            "SELECT id, exchange, routing_key, message_id, type, body, headers,"
            " correlation_id, order_key, attempts FROM {t} o WHERE sent_at IS NULL"
            " AND (next_attempt_at IS NULL OR next_attempt_at <= now())"
            " AND (order_key IS NULL OR NOT EXISTS (SELECT 1 FROM {t} w"
            "  WHERE w.order_key = o.order_key AND w.id < o.id AND w.sent_at IS NULL"
            "  AND w.next_attempt_at IS NOT NULL AND w.next_attempt_at > now()))"
            " ORDER BY id LIMIT %(limit)s"
        ).format(t=sql.Identifier(self.table))

    def failed(self) -> sql.Composed:
        # One statement for a batch's failed rows: each waits its own backoff.
        return sql.SQL(
            "UPDATE {t} SET attempts = {t}.attempts + 1,"
            " next_attempt_at = now() + make_interval(secs => f.delay), last_error = f.error"
            " FROM unnest(%(ids)s::bigint[], %(delays)s::float8[], %(errors)s::text[])"
            " AS f(id, delay, error) WHERE {t}.id = f.id AND {t}.sent_at IS NULL"
        ).format(t=sql.Identifier(self.table))

    def listing(self, where: sql.Composable) -> sql.Composed:
        return sql.SQL(
            "SELECT id, type, order_key, message_id, attempts, created_at, next_attempt_at,"
            " last_error FROM {} WHERE sent_at IS NULL AND ({}) ORDER BY id LIMIT %(limit)s"
        ).format(sql.Identifier(self.table), where)

    def retry(self, where: sql.Composable) -> sql.Composed:
        return sql.SQL(
            "UPDATE {} SET next_attempt_at = NULL WHERE sent_at IS NULL AND ({})"
        ).format(sql.Identifier(self.table), where)

    def discard(self, where: sql.Composable) -> sql.Composed:
        return sql.SQL(
            "DELETE FROM {} WHERE sent_at IS NULL AND ({}) RETURNING id, type, message_id"
        ).format(sql.Identifier(self.table), where)

    def mark_sent(self) -> sql.Composed:
        return sql.SQL("UPDATE {} SET sent_at = now() WHERE id = ANY(%(ids)s)").format(
            sql.Identifier(self.table)
        )

    def stats(self) -> sql.Composed:
        return sql.SQL(
            "SELECT count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0),"
            " count(*) FILTER (WHERE attempts > 0)"
            " FROM {} WHERE sent_at IS NULL"
        ).format(sql.Identifier(self.table))

    def purge_sent(self) -> sql.Composed:
        t = sql.Identifier(self.table)
        return sql.SQL(
            "DELETE FROM {t} WHERE id IN (SELECT id FROM {t} WHERE sent_at IS NOT NULL"
            " AND sent_at < now() - make_interval(secs => %(keep)s) LIMIT %(limit)s)"
        ).format(t=t)

    def drop(self) -> sql.Composed:
        return sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(self.table))
