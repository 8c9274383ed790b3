-- Layang's database schema after migration 34, as a fresh database has it.
--
-- Generated: do not edit. The migrations in layang/migrations/ are the source; after adding one,
-- regenerate this file with
--     python -m layang.migrations.schema --postgresql URL > docs/schema.sql
-- where URL names a PostgreSQL server whose user may create a throwaway database (e.g.
-- postgresql://postgres@127.0.0.1:5432/postgres); tests/test_schema.py fails while this file
-- differs from what the migrations produce. Two sections follow, PostgreSQL (the production
-- database) then SQLite, each table followed by its indexes and triggers, all sorted by name.
--
-- Counts kept by the database itself, so that no code path that stores mail can miss them:
--   activity_count_sent (trigger on "recipient")  counts each recipient stored as queued as sent
--       ("Injection") in "activity_count": the overview's hourly counts per account, sending
--       domain and stream (migrations 18, 21, 22).
--   activity_count_event (trigger on "event")  counts each event stored in "activity_count"
--       under its kind (a bounce under its class, "Bounce:hard"), per account, hour, sending
--       domain and stream: the activity counts by stream the overview charts (18, 21, 22).
--   activity_tag_count_sent, activity_tag_count_event (on "recipient", "event")  the same per
--       tag of the mail, in "activity_tag_count", joining "transmission_tag" (migration 32).
--   webhook_event_notify, webhook_delivery_notify (PostgreSQL only)  wake idle webhook
--       dispatchers (NOTIFY layang_webhooks) when webhook work is stored (migration 20).
-- Partitioned by week on PostgreSQL (migration 34; each "PARTITION BY" below): transmission,
--   transmission_tag, payload_chunk, recipient, event, webhook_delivery, webhook_attempt,
--   webhook_event. Their partitions (<table>_history, <table>_pYYYYMMDD, <table>_default) are
--   made and dropped by layang/lifecycle/partitions.py and not listed here.
-- The circuit breaker's counters ("breaker_count") are not kept by a trigger: layang/mail/
-- reputation.py adds to them in the same transaction as the events they count.

-- =================================================================================================
-- PostgreSQL
-- =================================================================================================

CREATE OR REPLACE FUNCTION public.activity_count_event()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
        BEGIN
          INSERT INTO "activity_count" ("account_id", "hour", "domain", "stream", "kind", "count")
          SELECT r."account_id", n."created_at" / 3600000 * 3600000, coalesce(lower(regexp_replace(CASE WHEN left(ltrim(t."from_header"), 1) = '{' THEN t."from_header"::json->>'email' END, '^.*@', '')), ''),
                 CASE WHEN r."priority" = 1 THEN 'broadcast' ELSE 'transactional' END, CASE WHEN n."status" = 'Bounce' THEN 'Bounce:' || coalesce(CASE WHEN left(ltrim(n."detail"), 1) = '{' THEN n."detail"::json->>'bounceClass' END, 'undetermined') ELSE n."status" END, count(*)
          FROM "new_rows" n
          CROSS JOIN LATERAL (SELECT "account_id", "priority", "transmission_id"
            FROM "recipient" WHERE "id" = n."recipient_id" OFFSET 0) r
          CROSS JOIN LATERAL (SELECT "from_header" FROM "transmission"   WHERE "id" = r."transmission_id" OFFSET 0) t
          GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
          ON CONFLICT ("account_id", "hour", "domain", "stream", "kind") DO UPDATE SET "count" = "activity_count"."count" + EXCLUDED."count";
          RETURN NULL;
        END $function$;

CREATE OR REPLACE FUNCTION public.activity_count_sent()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
        BEGIN
          INSERT INTO "activity_count" ("account_id", "hour", "domain", "stream", "kind", "count")
          SELECT n."account_id", n."created_at" / 3600000 * 3600000, coalesce(lower(regexp_replace(CASE WHEN left(ltrim(t."from_header"), 1) = '{' THEN t."from_header"::json->>'email' END, '^.*@', '')), ''),
                 CASE WHEN n."priority" = 1 THEN 'broadcast' ELSE 'transactional' END, 'Injection', count(*)
          FROM "new_rows" n CROSS JOIN LATERAL (SELECT "from_header" FROM "transmission"   WHERE "id" = n."transmission_id" OFFSET 0) t
          WHERE n."status" = 'Injection'
          GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
          ON CONFLICT ("account_id", "hour", "domain", "stream", "kind") DO UPDATE SET "count" = "activity_count"."count" + EXCLUDED."count";
          RETURN NULL;
        END $function$;

CREATE OR REPLACE FUNCTION public.activity_tag_count_event()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
        BEGIN
          INSERT INTO "activity_tag_count" ("account_id", "hour", "tag", "kind", "count")
          SELECT r."account_id", n."created_at" / 3600000 * 3600000, g."tag",
                 CASE WHEN n."status" = 'Bounce' THEN 'Bounce:' || coalesce(CASE WHEN left(ltrim(n."detail"), 1) = '{' THEN n."detail"::json->>'bounceClass' END, 'undetermined') ELSE n."status" END, count(*)
          FROM "new_rows" n
          CROSS JOIN LATERAL (SELECT "account_id", "transmission_id"
            FROM "recipient" WHERE "id" = n."recipient_id" OFFSET 0) r
          CROSS JOIN LATERAL (SELECT "tag" FROM "transmission_tag"   WHERE "transmission_id" = r."transmission_id" OFFSET 0) g
          GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
          ON CONFLICT ("account_id", "hour", "tag", "kind") DO UPDATE SET "count" = "activity_tag_count"."count" + EXCLUDED."count";
          RETURN NULL;
        END $function$;

CREATE OR REPLACE FUNCTION public.activity_tag_count_sent()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
        BEGIN
          INSERT INTO "activity_tag_count" ("account_id", "hour", "tag", "kind", "count")
          SELECT n."account_id", n."created_at" / 3600000 * 3600000, g."tag",
                 'Injection', count(*)
          FROM "new_rows" n CROSS JOIN LATERAL (SELECT "tag" FROM "transmission_tag"   WHERE "transmission_id" = n."transmission_id" OFFSET 0) g
          WHERE n."status" = 'Injection'
          GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
          ON CONFLICT ("account_id", "hour", "tag", "kind") DO UPDATE SET "count" = "activity_tag_count"."count" + EXCLUDED."count";
          RETURN NULL;
        END $function$;

CREATE OR REPLACE FUNCTION public.webhook_notify()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
        BEGIN
          IF EXISTS (SELECT 1 FROM "new_rows") THEN
            PERFORM pg_notify('layang_webhooks', '');
          END IF;
          RETURN NULL;
        END $function$;

CREATE TABLE "account" (
    "id" integer DEFAULT nextval('account_id_seq'::regclass) NOT NULL,
    "name" character varying(64) NOT NULL,
    "mode" character varying(16) NOT NULL,
    "created_at" bigint NOT NULL,
    "retention_days" integer,
    "content_days" integer,
    "store_content" boolean DEFAULT true NOT NULL,
    "two_factor_required_at" bigint,
    CONSTRAINT "account_pkey" PRIMARY KEY (id)
);
CREATE SEQUENCE "account_id_seq" AS integer OWNED BY "account"."id";
CREATE UNIQUE INDEX account_name ON public.account USING btree (name);

CREATE TABLE "activity_count" (
    "id" integer DEFAULT nextval('activity_count_id_seq'::regclass) NOT NULL,
    "account_id" integer NOT NULL,
    "hour" bigint NOT NULL,
    "domain" character varying(253) NOT NULL,
    "kind" character varying(32) NOT NULL,
    "count" bigint NOT NULL,
    "stream" character varying(16) DEFAULT 'transactional'::character varying NOT NULL,
    CONSTRAINT "activity_count_pkey" PRIMARY KEY (id),
    CONSTRAINT "activity_count_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE
);
CREATE SEQUENCE "activity_count_id_seq" AS integer OWNED BY "activity_count"."id";
CREATE UNIQUE INDEX activity_count_account_id_hour_domain_stream_kind ON public.activity_count USING btree (account_id, hour, domain, stream, kind);

CREATE TABLE "activity_tag_count" (
    "id" integer DEFAULT nextval('activity_tag_count_id_seq'::regclass) NOT NULL,
    "account_id" integer NOT NULL,
    "hour" bigint NOT NULL,
    "tag" character varying(64) NOT NULL,
    "kind" character varying(32) NOT NULL,
    "count" bigint NOT NULL,
    CONSTRAINT "activity_tag_count_pkey" PRIMARY KEY (id),
    CONSTRAINT "activity_tag_count_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE
);
CREATE SEQUENCE "activity_tag_count_id_seq" AS integer OWNED BY "activity_tag_count"."id";
CREATE UNIQUE INDEX activity_tag_count_account_id_hour_tag_kind ON public.activity_tag_count USING btree (account_id, hour, tag, kind);

CREATE TABLE "api_key" (
    "id" character varying(32) NOT NULL,
    "account_id" integer NOT NULL,
    "label" character varying(200) NOT NULL,
    "prefix" character varying(16) NOT NULL,
    "secret_hash" character varying(64) NOT NULL,
    "created_at" bigint NOT NULL,
    "revoked_at" bigint,
    "scope" character varying(8) DEFAULT 'full'::character varying NOT NULL,
    CONSTRAINT "api_key_pkey" PRIMARY KEY (id),
    CONSTRAINT "api_key_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE
);
CREATE INDEX api_key_account_id ON public.api_key USING btree (account_id);
CREATE UNIQUE INDEX api_key_secret_hash ON public.api_key USING btree (secret_hash);

CREATE TABLE "audit_entry" (
    "id" integer DEFAULT nextval('audit_entry_id_seq'::regclass) NOT NULL,
    "account_id" integer,
    "at" bigint NOT NULL,
    "actor" character varying(320) NOT NULL,
    "action" character varying(64) NOT NULL,
    "target" character varying(512) NOT NULL,
    "source" character varying(64) NOT NULL,
    "detail" text NOT NULL,
    CONSTRAINT "audit_entry_pkey" PRIMARY KEY (id),
    CONSTRAINT "audit_entry_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE
);
CREATE SEQUENCE "audit_entry_id_seq" AS integer OWNED BY "audit_entry"."id";
CREATE INDEX audit_entry_account_id_at ON public.audit_entry USING btree (account_id, at);
CREATE INDEX audit_entry_at ON public.audit_entry USING btree (at);

CREATE TABLE "authorized_recipient" (
    "id" character varying(26) NOT NULL,
    "account_id" integer NOT NULL,
    "email" character varying(320) NOT NULL,
    "email_key" character varying(320) NOT NULL,
    "name" character varying(256),
    "status" character varying(16) NOT NULL,
    "created_at" bigint NOT NULL,
    "verified_at" bigint,
    "token_hash" character varying(64),
    "token_expires_at" bigint,
    CONSTRAINT "authorized_recipient_pkey" PRIMARY KEY (id),
    CONSTRAINT "authorized_recipient_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE
);
CREATE INDEX authorized_recipient_account_id ON public.authorized_recipient USING btree (account_id);
CREATE UNIQUE INDEX authorized_recipient_account_id_email_key ON public.authorized_recipient USING btree (account_id, email_key);
CREATE UNIQUE INDEX authorized_recipient_token_hash ON public.authorized_recipient USING btree (token_hash);

CREATE TABLE "breaker_count" (
    "id" integer DEFAULT nextval('breaker_count_id_seq'::regclass) NOT NULL,
    "account_id" integer NOT NULL,
    "domain" character varying(253) NOT NULL,
    "bucket" bigint NOT NULL,
    "sent" integer NOT NULL,
    "hard_bounces" integer NOT NULL,
    "complaints" integer NOT NULL,
    CONSTRAINT "breaker_count_pkey" PRIMARY KEY (id),
    CONSTRAINT "breaker_count_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE
);
CREATE SEQUENCE "breaker_count_id_seq" AS integer OWNED BY "breaker_count"."id";
CREATE UNIQUE INDEX breaker_count_account_id_domain_bucket ON public.breaker_count USING btree (account_id, domain, bucket);

CREATE TABLE "breaker_state" (
    "id" integer DEFAULT nextval('breaker_state_id_seq'::regclass) NOT NULL,
    "account_id" integer NOT NULL,
    "domain" character varying(253) NOT NULL,
    "level" integer NOT NULL,
    "reason" text NOT NULL,
    "changed_at" bigint NOT NULL,
    CONSTRAINT "breaker_state_pkey" PRIMARY KEY (id),
    CONSTRAINT "breaker_state_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE
);
CREATE SEQUENCE "breaker_state_id_seq" AS integer OWNED BY "breaker_state"."id";
CREATE UNIQUE INDEX breaker_state_account_id_domain ON public.breaker_state USING btree (account_id, domain);

CREATE TABLE "console_session" (
    "id" character varying(64) NOT NULL,
    "key_id" character varying(32) NOT NULL,
    "created_at" bigint NOT NULL,
    "expires_at" bigint NOT NULL,
    CONSTRAINT "console_session_pkey" PRIMARY KEY (id),
    CONSTRAINT "console_session_key_id_fkey" FOREIGN KEY (key_id) REFERENCES api_key(id) ON DELETE CASCADE
);
CREATE INDEX console_session_expires_at ON public.console_session USING btree (expires_at);
CREATE INDEX console_session_key_id ON public.console_session USING btree (key_id);

CREATE TABLE "console_user" (
    "id" character varying(32) NOT NULL,
    "email" character varying(320) NOT NULL,
    "email_key" character varying(320) NOT NULL,
    "password_hash" character varying(255),
    "totp_seed" bytea,
    "totp_last_step" bigint,
    "failed_passwords" integer DEFAULT 0 NOT NULL,
    "locked_until" bigint,
    "created_at" bigint NOT NULL,
    "password_changed_at" bigint,
    CONSTRAINT "console_user_pkey" PRIMARY KEY (id)
);
CREATE UNIQUE INDEX console_user_email_key ON public.console_user USING btree (email_key);

CREATE TABLE "dkim_key" (
    "id" integer DEFAULT nextval('dkim_key_id_seq'::regclass) NOT NULL,
    "sending_domain_id" integer NOT NULL,
    "selector" character varying(63) NOT NULL,
    "algorithm" character varying(16) NOT NULL,
    "bits" integer NOT NULL,
    "status" character varying(16) NOT NULL,
    "public_key" text NOT NULL,
    "private_key" bytea NOT NULL,
    "created_at" bigint NOT NULL,
    "activated_at" bigint,
    CONSTRAINT "dkim_key_pkey" PRIMARY KEY (id),
    CONSTRAINT "dkim_key_sending_domain_id_fkey" FOREIGN KEY (sending_domain_id) REFERENCES sending_domain(id) ON DELETE CASCADE
);
CREATE SEQUENCE "dkim_key_id_seq" AS integer OWNED BY "dkim_key"."id";
CREATE INDEX dkim_key_sending_domain_id ON public.dkim_key USING btree (sending_domain_id);
CREATE UNIQUE INDEX dkim_key_sending_domain_id_selector ON public.dkim_key USING btree (sending_domain_id, selector);

CREATE TABLE "dmarc_record" (
    "id" integer DEFAULT nextval('dmarc_record_id_seq'::regclass) NOT NULL,
    "report_id" integer NOT NULL,
    "domain" character varying(253) NOT NULL,
    "begins_at" bigint NOT NULL,
    "source_ip" character varying(45) NOT NULL,
    "count" integer NOT NULL,
    "disposition" character varying(16) NOT NULL,
    "dkim" character varying(16) NOT NULL,
    "spf" character varying(16) NOT NULL,
    "dkim_aligned" integer NOT NULL,
    "spf_aligned" integer NOT NULL,
    "header_from" character varying(253) NOT NULL,
    "dkim_domains" text NOT NULL,
    CONSTRAINT "dmarc_record_pkey" PRIMARY KEY (id),
    CONSTRAINT "dmarc_record_report_id_fkey" FOREIGN KEY (report_id) REFERENCES dmarc_report(id) ON DELETE CASCADE
);
CREATE SEQUENCE "dmarc_record_id_seq" AS integer OWNED BY "dmarc_record"."id";
CREATE INDEX dmarc_record_domain_begins_at ON public.dmarc_record USING btree (domain, begins_at);
CREATE INDEX dmarc_record_report_id ON public.dmarc_record USING btree (report_id);

CREATE TABLE "dmarc_report" (
    "id" integer DEFAULT nextval('dmarc_report_id_seq'::regclass) NOT NULL,
    "domain" character varying(253) NOT NULL,
    "org_name" text NOT NULL,
    "report_id" character varying(255) NOT NULL,
    "begins_at" bigint NOT NULL,
    "ends_at" bigint NOT NULL,
    "received_at" bigint NOT NULL,
    "account_id" integer,
    CONSTRAINT "dmarc_report_pkey" PRIMARY KEY (id),
    CONSTRAINT "dmarc_report_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE
);
CREATE SEQUENCE "dmarc_report_id_seq" AS integer OWNED BY "dmarc_report"."id";
CREATE INDEX dmarc_report_account_id ON public.dmarc_report USING btree (account_id);
CREATE INDEX dmarc_report_domain ON public.dmarc_report USING btree (domain);
CREATE UNIQUE INDEX dmarc_report_org_name_report_id ON public.dmarc_report USING btree (org_name, report_id);

CREATE TABLE "event" (
    "id" integer DEFAULT nextval('event_id_seq'::regclass) NOT NULL,
    "recipient_id" character varying(26) NOT NULL,
    "status" character varying(16) NOT NULL,
    "created_at" bigint NOT NULL,
    "detail" text NOT NULL,
    CONSTRAINT "event_pkey" PRIMARY KEY (id, recipient_id)
) PARTITION BY RANGE (recipient_id);
CREATE SEQUENCE "event_id_seq" AS integer OWNED BY "event"."id";
CREATE INDEX event_recipient_id ON ONLY public.event USING btree (recipient_id);
CREATE TRIGGER activity_count_event AFTER INSERT ON public.event REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION activity_count_event();
CREATE TRIGGER activity_tag_count_event AFTER INSERT ON public.event REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION activity_tag_count_event();

CREATE TABLE "idempotency_answer" (
    "id" integer DEFAULT nextval('idempotency_answer_id_seq'::regclass) NOT NULL,
    "account_id" integer NOT NULL,
    "key" character varying(255) NOT NULL,
    "fingerprint" character varying(64) NOT NULL,
    "status" integer NOT NULL,
    "body" text NOT NULL,
    "expires_at" bigint NOT NULL,
    CONSTRAINT "idempotency_answer_pkey" PRIMARY KEY (id),
    CONSTRAINT "idempotency_answer_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE
);
CREATE SEQUENCE "idempotency_answer_id_seq" AS integer OWNED BY "idempotency_answer"."id";
CREATE UNIQUE INDEX idempotency_answer_account_id_key ON public.idempotency_answer USING btree (account_id, key);
CREATE INDEX idempotency_answer_expires_at ON public.idempotency_answer USING btree (expires_at);

CREATE TABLE "idempotency_key" (
    "id" integer DEFAULT nextval('idempotency_key_id_seq'::regclass) NOT NULL,
    "account_id" integer NOT NULL,
    "key" character varying(255) NOT NULL,
    "fingerprint" character varying(64) NOT NULL,
    "token" character varying(32) NOT NULL,
    "claimed_at" bigint NOT NULL,
    "expires_at" bigint NOT NULL,
    CONSTRAINT "idempotency_key_pkey" PRIMARY KEY (id),
    CONSTRAINT "idempotency_key_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE
);
CREATE SEQUENCE "idempotency_key_id_seq" AS integer OWNED BY "idempotency_key"."id";
CREATE UNIQUE INDEX idempotency_key_account_id_key ON public.idempotency_key USING btree (account_id, key);
CREATE INDEX idempotency_key_expires_at ON public.idempotency_key USING btree (expires_at);

CREATE TABLE "inbound_domain" (
    "id" integer DEFAULT nextval('inbound_domain_id_seq'::regclass) NOT NULL,
    "account_id" integer NOT NULL,
    "domain" character varying(253) NOT NULL,
    "status" character varying(16) NOT NULL,
    "records" text NOT NULL,
    "created_at" bigint NOT NULL,
    "checked_at" bigint,
    "verified_at" bigint,
    CONSTRAINT "inbound_domain_pkey" PRIMARY KEY (id),
    CONSTRAINT "inbound_domain_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE
);
CREATE SEQUENCE "inbound_domain_id_seq" AS integer OWNED BY "inbound_domain"."id";
CREATE INDEX inbound_domain_account_id ON public.inbound_domain USING btree (account_id);
CREATE UNIQUE INDEX inbound_domain_account_id_domain ON public.inbound_domain USING btree (account_id, domain);
CREATE UNIQUE INDEX inbound_domain_verified_domain ON public.inbound_domain USING btree (domain) WHERE ((status)::text = 'verified'::text);

CREATE TABLE "inbound_email" (
    "id" character varying(26) NOT NULL,
    "account_id" integer NOT NULL,
    "route_id" character varying(26),
    "route_match" character varying(320) NOT NULL,
    "action" character varying(16) NOT NULL,
    "received_at" bigint NOT NULL,
    "mail_from" character varying(512) NOT NULL,
    "rcpt_to" text NOT NULL,
    "from_header" text NOT NULL,
    "subject" text NOT NULL,
    "size" integer NOT NULL,
    "spam_score" real,
    "note" text,
    "payload" text NOT NULL,
    "raw" bytea NOT NULL,
    "delivery_id" character varying(26),
    "deliveries" text NOT NULL,
    CONSTRAINT "inbound_email_pkey" PRIMARY KEY (id),
    CONSTRAINT "inbound_email_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE,
    CONSTRAINT "inbound_email_route_id_fkey" FOREIGN KEY (route_id) REFERENCES inbound_route(id) ON DELETE SET NULL
);
CREATE INDEX inbound_email_account_id ON public.inbound_email USING btree (account_id);
CREATE INDEX inbound_email_account_id_id ON public.inbound_email USING btree (account_id, id);
CREATE INDEX inbound_email_received_at ON public.inbound_email USING btree (received_at);
CREATE INDEX inbound_email_route_id ON public.inbound_email USING btree (route_id);

CREATE TABLE "inbound_message" (
    "id" integer DEFAULT nextval('inbound_message_id_seq'::regclass) NOT NULL,
    "received_at" bigint NOT NULL,
    "mail_from" text NOT NULL,
    "rcpt_to" text NOT NULL,
    "size" integer NOT NULL,
    "raw" bytea NOT NULL,
    "reason" text NOT NULL,
    CONSTRAINT "inbound_message_pkey" PRIMARY KEY (id)
);
CREATE SEQUENCE "inbound_message_id_seq" AS integer OWNED BY "inbound_message"."id";
CREATE INDEX inbound_message_received_at ON public.inbound_message USING btree (received_at);

CREATE TABLE "inbound_route" (
    "id" character varying(26) NOT NULL,
    "account_id" integer NOT NULL,
    "domain_id" integer NOT NULL,
    "local_part" character varying(64) NOT NULL,
    "action" character varying(16) NOT NULL,
    "endpoint_id" character varying(26),
    "spam_threshold" real,
    "created_at" bigint NOT NULL,
    CONSTRAINT "inbound_route_pkey" PRIMARY KEY (id),
    CONSTRAINT "inbound_route_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE,
    CONSTRAINT "inbound_route_domain_id_fkey" FOREIGN KEY (domain_id) REFERENCES inbound_domain(id) ON DELETE CASCADE,
    CONSTRAINT "inbound_route_endpoint_id_fkey" FOREIGN KEY (endpoint_id) REFERENCES webhook_endpoint(id) ON DELETE SET NULL
);
CREATE INDEX inbound_route_account_id ON public.inbound_route USING btree (account_id);
CREATE INDEX inbound_route_domain_id ON public.inbound_route USING btree (domain_id);
CREATE UNIQUE INDEX inbound_route_domain_id_local_part ON public.inbound_route USING btree (domain_id, local_part);
CREATE INDEX inbound_route_endpoint_id ON public.inbound_route USING btree (endpoint_id);

CREATE TABLE "membership" (
    "id" integer DEFAULT nextval('membership_id_seq'::regclass) NOT NULL,
    "user_id" character varying(32) NOT NULL,
    "account_id" integer NOT NULL,
    "role" character varying(16) NOT NULL,
    "created_at" bigint NOT NULL,
    CONSTRAINT "membership_pkey" PRIMARY KEY (id),
    CONSTRAINT "membership_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE,
    CONSTRAINT "membership_user_id_fkey" FOREIGN KEY (user_id) REFERENCES console_user(id) ON DELETE CASCADE
);
CREATE SEQUENCE "membership_id_seq" AS integer OWNED BY "membership"."id";
CREATE INDEX membership_account_id ON public.membership USING btree (account_id);
CREATE UNIQUE INDEX membership_user_id_account_id ON public.membership USING btree (user_id, account_id);

CREATE TABLE "mta_sts_policy" (
    "domain" character varying(255) NOT NULL,
    "policy_id" character varying(32) NOT NULL,
    "mode" character varying(16) NOT NULL,
    "mx" text NOT NULL,
    "max_age" integer NOT NULL,
    "text" text NOT NULL,
    "fetched_at" bigint NOT NULL,
    "expires_at" bigint NOT NULL,
    CONSTRAINT "mta_sts_policy_pkey" PRIMARY KEY (domain)
);

CREATE TABLE "mx_domain" (
    "domain" character varying(253) NOT NULL,
    "site" text NOT NULL,
    "expires_at" bigint NOT NULL,
    CONSTRAINT "mx_domain_pkey" PRIMARY KEY (domain)
);
CREATE INDEX mx_domain_site ON public.mx_domain USING btree (site);

CREATE TABLE "passkey" (
    "id" character varying(1400) NOT NULL,
    "user_id" character varying(32) NOT NULL,
    "public_key" bytea NOT NULL,
    "sign_count" bigint NOT NULL,
    "label" character varying(100) NOT NULL,
    "created_at" bigint NOT NULL,
    "used_at" bigint,
    CONSTRAINT "passkey_pkey" PRIMARY KEY (id),
    CONSTRAINT "passkey_user_id_fkey" FOREIGN KEY (user_id) REFERENCES console_user(id) ON DELETE CASCADE
);
CREATE INDEX passkey_user_id ON public.passkey USING btree (user_id);

CREATE TABLE "payload_chunk" (
    "transmission_id" character varying(26) NOT NULL,
    "seq" integer NOT NULL,
    "text" text NOT NULL,
    CONSTRAINT "payload_chunk_pkey" PRIMARY KEY (transmission_id, seq)
) PARTITION BY RANGE (transmission_id);

CREATE TABLE "rate_window" (
    "id" integer DEFAULT nextval('rate_window_id_seq'::regclass) NOT NULL,
    "account_id" integer NOT NULL,
    "starts_at" bigint NOT NULL,
    "ends_at" bigint NOT NULL,
    "count" integer NOT NULL,
    CONSTRAINT "rate_window_pkey" PRIMARY KEY (id),
    CONSTRAINT "rate_window_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE
);
CREATE SEQUENCE "rate_window_id_seq" AS integer OWNED BY "rate_window"."id";
CREATE UNIQUE INDEX rate_window_account_id_starts_at ON public.rate_window USING btree (account_id, starts_at);
CREATE INDEX rate_window_ends_at ON public.rate_window USING btree (ends_at);

CREATE TABLE "recipient" (
    "id" character varying(26) NOT NULL,
    "transmission_id" character varying(26) NOT NULL,
    "account_id" integer NOT NULL,
    "address" character varying(320) NOT NULL,
    "recipient_type" character varying(3) NOT NULL,
    "status" character varying(16) NOT NULL,
    "created_at" bigint NOT NULL,
    "updated_at" bigint NOT NULL,
    "attempts" integer NOT NULL,
    "next_attempt_at" bigint,
    "lease_owner" character varying(64),
    "lease_expires_at" bigint,
    "domain" text,
    "waiting_on" text,
    "priority" integer DEFAULT 0 NOT NULL,
    "content" text,
    "metadata" text,
    "scheduled_at" bigint,
    CONSTRAINT "recipient_pkey" PRIMARY KEY (id),
    CONSTRAINT "recipient_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE
) PARTITION BY RANGE (id);
CREATE INDEX recipient_account_id_id ON ONLY public.recipient USING btree (account_id, id);
CREATE INDEX recipient_account_id_status_id ON ONLY public.recipient USING btree (account_id, status, id);
CREATE INDEX recipient_domain_next_attempt_at ON ONLY public.recipient USING btree (domain, next_attempt_at);
CREATE INDEX recipient_next_attempt_at ON ONLY public.recipient USING btree (next_attempt_at);
CREATE INDEX recipient_priority_next_attempt_at ON ONLY public.recipient USING btree (priority, next_attempt_at);
CREATE INDEX recipient_scheduled_at ON ONLY public.recipient USING btree (scheduled_at);
CREATE INDEX recipient_transmission_id ON ONLY public.recipient USING btree (transmission_id);
CREATE INDEX recipient_waiting_on ON ONLY public.recipient USING btree (waiting_on);
CREATE TRIGGER activity_count_sent AFTER INSERT ON public.recipient REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION activity_count_sent();
CREATE TRIGGER activity_tag_count_sent AFTER INSERT ON public.recipient REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION activity_tag_count_sent();

CREATE TABLE "schema_version" (
    "version" integer NOT NULL,
    "applied_at" bigint NOT NULL,
    CONSTRAINT "schema_version_pkey" PRIMARY KEY (version)
);

CREATE TABLE "sending_domain" (
    "id" integer DEFAULT nextval('sending_domain_id_seq'::regclass) NOT NULL,
    "account_id" integer NOT NULL,
    "domain" character varying(253) NOT NULL,
    "return_path_domain" character varying(253) NOT NULL,
    "status" character varying(16) NOT NULL,
    "records" text NOT NULL,
    "created_at" bigint NOT NULL,
    "checked_at" bigint,
    "verified_at" bigint,
    CONSTRAINT "sending_domain_pkey" PRIMARY KEY (id),
    CONSTRAINT "sending_domain_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE
);
CREATE SEQUENCE "sending_domain_id_seq" AS integer OWNED BY "sending_domain"."id";
CREATE INDEX sending_domain_account_id ON public.sending_domain USING btree (account_id);
CREATE UNIQUE INDEX sending_domain_account_id_domain ON public.sending_domain USING btree (account_id, domain);
CREATE UNIQUE INDEX sending_domain_verified_domain ON public.sending_domain USING btree (domain) WHERE ((status)::text = 'verified'::text);

CREATE TABLE "sign_in_window" (
    "key" character varying(400) NOT NULL,
    "starts_at" bigint NOT NULL,
    "ends_at" bigint NOT NULL,
    "count" integer NOT NULL,
    CONSTRAINT "sign_in_window_pkey" PRIMARY KEY (key, starts_at)
);
CREATE INDEX sign_in_window_ends_at ON public.sign_in_window USING btree (ends_at);

CREATE TABLE "site_slot" (
    "id" character varying(26) NOT NULL,
    "site" character varying(1000) NOT NULL,
    "owner" character varying(64) NOT NULL,
    "expires_at" bigint NOT NULL,
    CONSTRAINT "site_slot_pkey" PRIMARY KEY (id)
);
CREATE INDEX site_slot_owner ON public.site_slot USING btree (owner);
CREATE INDEX site_slot_site_expires_at ON public.site_slot USING btree (site, expires_at);

CREATE TABLE "site_state" (
    "site" character varying(1000) NOT NULL,
    "connection_limit" integer,
    "rule_limit" integer,
    "state" character varying(16) NOT NULL,
    "until_ms" bigint,
    "reason" text,
    "last_reply" text,
    "pause_ms" bigint NOT NULL,
    "signal_at" bigint,
    "failures" integer NOT NULL,
    "rate_tat_us" bigint,
    "updated_at" bigint NOT NULL,
    "wanted_at" bigint,
    "wanted_by" character varying(64),
    CONSTRAINT "site_state_pkey" PRIMARY KEY (site)
);

CREATE TABLE "suppression" (
    "id" character varying(26) NOT NULL,
    "account_id" integer NOT NULL,
    "email" character varying(320) NOT NULL,
    "email_key" character varying(320) NOT NULL,
    "reason" character varying(16) NOT NULL,
    "transmission_id" character varying(26),
    "detail" text NOT NULL,
    "note" text NOT NULL,
    "created_at" bigint NOT NULL,
    CONSTRAINT "suppression_pkey" PRIMARY KEY (id),
    CONSTRAINT "suppression_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX suppression_account_id_email_key ON public.suppression USING btree (account_id, email_key);
CREATE INDEX suppression_account_id_id ON public.suppression USING btree (account_id, id);

CREATE TABLE "template" (
    "id" integer DEFAULT nextval('template_id_seq'::regclass) NOT NULL,
    "account_id" integer NOT NULL,
    "template_id" character varying(64) NOT NULL,
    "name" text NOT NULL,
    "current_version" integer NOT NULL,
    "created_at" bigint NOT NULL,
    "updated_at" bigint NOT NULL,
    CONSTRAINT "template_pkey" PRIMARY KEY (id)
);
CREATE SEQUENCE "template_id_seq" AS integer OWNED BY "template"."id";
CREATE INDEX template_account_id ON public.template USING btree (account_id);
CREATE UNIQUE INDEX template_account_id_template_id ON public.template USING btree (account_id, template_id);

CREATE TABLE "template_version" (
    "id" integer DEFAULT nextval('template_version_id_seq'::regclass) NOT NULL,
    "template_id" integer NOT NULL,
    "version" integer NOT NULL,
    "revision" character varying(32) NOT NULL,
    "name" text NOT NULL,
    "subject" text,
    "source_html" text,
    "body_html" text,
    "body_text" text,
    "shortcodes" text NOT NULL,
    "created_at" bigint NOT NULL,
    CONSTRAINT "template_version_pkey" PRIMARY KEY (id),
    CONSTRAINT "template_version_template_id_fkey" FOREIGN KEY (template_id) REFERENCES template(id) ON DELETE CASCADE
);
CREATE SEQUENCE "template_version_id_seq" AS integer OWNED BY "template_version"."id";
CREATE UNIQUE INDEX template_version_revision ON public.template_version USING btree (revision);
CREATE INDEX template_version_template_id ON public.template_version USING btree (template_id);
CREATE UNIQUE INDEX template_version_template_id_version ON public.template_version USING btree (template_id, version);

CREATE TABLE "tls_report" (
    "id" integer DEFAULT nextval('tls_report_id_seq'::regclass) NOT NULL,
    "day" character varying(10) NOT NULL,
    "policy_domain" character varying(255) NOT NULL,
    "status" character varying(16) NOT NULL,
    "report_id" character varying(200) NOT NULL,
    "rua" text NOT NULL,
    "detail" text NOT NULL,
    "created_at" bigint NOT NULL,
    CONSTRAINT "tls_report_pkey" PRIMARY KEY (id)
);
CREATE SEQUENCE "tls_report_id_seq" AS integer OWNED BY "tls_report"."id";
CREATE UNIQUE INDEX tls_report_day_policy_domain ON public.tls_report USING btree (day, policy_domain);

CREATE TABLE "tls_session_result" (
    "id" integer DEFAULT nextval('tls_session_result_id_seq'::regclass) NOT NULL,
    "row_key" character varying(64) NOT NULL,
    "day" character varying(10) NOT NULL,
    "policy_domain" character varying(255) NOT NULL,
    "policy_type" character varying(16) NOT NULL,
    "policy_strings" text NOT NULL,
    "mx_host" character varying(255) NOT NULL,
    "result_type" character varying(40) NOT NULL,
    "detail" text NOT NULL,
    "sessions" integer NOT NULL,
    "updated_at" bigint NOT NULL,
    CONSTRAINT "tls_session_result_pkey" PRIMARY KEY (id)
);
CREATE SEQUENCE "tls_session_result_id_seq" AS integer OWNED BY "tls_session_result"."id";
CREATE INDEX tls_session_result_day_policy_domain ON public.tls_session_result USING btree (day, policy_domain);
CREATE UNIQUE INDEX tls_session_result_row_key ON public.tls_session_result USING btree (row_key);

CREATE TABLE "tracking_domain" (
    "id" integer DEFAULT nextval('tracking_domain_id_seq'::regclass) NOT NULL,
    "account_id" integer NOT NULL,
    "domain" character varying(253) NOT NULL,
    "status" character varying(16) NOT NULL,
    "created_at" bigint NOT NULL,
    "checked_at" bigint,
    "found" text,
    CONSTRAINT "tracking_domain_pkey" PRIMARY KEY (id),
    CONSTRAINT "tracking_domain_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE
);
CREATE SEQUENCE "tracking_domain_id_seq" AS integer OWNED BY "tracking_domain"."id";
CREATE UNIQUE INDEX tracking_domain_account_id_domain ON public.tracking_domain USING btree (account_id, domain);
CREATE INDEX tracking_domain_domain_status ON public.tracking_domain USING btree (domain, status);

CREATE TABLE "transmission" (
    "id" character varying(26) NOT NULL,
    "account_id" integer NOT NULL,
    "created_at" bigint NOT NULL,
    "source" character varying(8) NOT NULL,
    "mail_from" character varying(320) NOT NULL,
    "from_header" text NOT NULL,
    "subject" text NOT NULL,
    "message_id" character varying(400) NOT NULL,
    "metadata" text NOT NULL,
    "payload" text,
    "raw" bytea,
    "stream" character varying(16) DEFAULT 'transactional'::character varying NOT NULL,
    "from_domain" character varying(253) DEFAULT ''::character varying NOT NULL,
    "tls_requirement" character varying(16),
    "content_expired_at" bigint,
    "personalized" integer DEFAULT 0 NOT NULL,
    "tags" text,
    "scheduled_at" bigint,
    CONSTRAINT "transmission_pkey" PRIMARY KEY (id),
    CONSTRAINT "transmission_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE
) PARTITION BY RANGE (id);
CREATE INDEX transmission_account_id ON ONLY public.transmission USING btree (account_id);
CREATE INDEX transmission_content_kept ON ONLY public.transmission USING btree (account_id, id) WHERE (content_expired_at IS NULL);

CREATE TABLE "transmission_tag" (
    "transmission_id" character varying(26) NOT NULL,
    "account_id" integer NOT NULL,
    "tag" character varying(64) NOT NULL,
    CONSTRAINT "transmission_tag_pkey" PRIMARY KEY (transmission_id, tag),
    CONSTRAINT "transmission_tag_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE
) PARTITION BY RANGE (transmission_id);
CREATE INDEX transmission_tag_account_id_tag_transmission_id ON ONLY public.transmission_tag USING btree (account_id, tag, transmission_id);
CREATE INDEX transmission_tag_transmission_id ON ONLY public.transmission_tag USING btree (transmission_id);

CREATE TABLE "user_session" (
    "id" character varying(64) NOT NULL,
    "user_id" character varying(32) NOT NULL,
    "account_id" integer,
    "created_at" bigint NOT NULL,
    "seen_at" bigint NOT NULL,
    "expires_at" bigint NOT NULL,
    "source" character varying(64) NOT NULL,
    "user_agent" character varying(200) NOT NULL,
    CONSTRAINT "user_session_pkey" PRIMARY KEY (id),
    CONSTRAINT "user_session_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE SET NULL,
    CONSTRAINT "user_session_user_id_fkey" FOREIGN KEY (user_id) REFERENCES console_user(id) ON DELETE CASCADE
);
CREATE INDEX user_session_expires_at ON public.user_session USING btree (expires_at);
CREATE INDEX user_session_user_id ON public.user_session USING btree (user_id);

CREATE TABLE "user_token" (
    "id" character varying(64) NOT NULL,
    "purpose" character varying(16) NOT NULL,
    "email" character varying(320) NOT NULL,
    "user_id" character varying(32),
    "account_id" integer,
    "role" character varying(16),
    "created_by" character varying(320) NOT NULL,
    "created_at" bigint NOT NULL,
    "expires_at" bigint NOT NULL,
    "used_at" bigint,
    CONSTRAINT "user_token_pkey" PRIMARY KEY (id),
    CONSTRAINT "user_token_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE,
    CONSTRAINT "user_token_user_id_fkey" FOREIGN KEY (user_id) REFERENCES console_user(id) ON DELETE CASCADE
);
CREATE INDEX user_token_account_id ON public.user_token USING btree (account_id);
CREATE INDEX user_token_expires_at ON public.user_token USING btree (expires_at);

CREATE TABLE "webhook_attempt" (
    "id" character varying(26) NOT NULL,
    "delivery_id" character varying(26) NOT NULL,
    "endpoint_id" character varying(26) NOT NULL,
    "attempted_at" bigint NOT NULL,
    "status" character varying(16) NOT NULL,
    "response_status" integer,
    "error" text,
    "next_attempt_at" bigint,
    CONSTRAINT "webhook_attempt_pkey" PRIMARY KEY (id, delivery_id),
    CONSTRAINT "webhook_attempt_endpoint_id_fkey" FOREIGN KEY (endpoint_id) REFERENCES webhook_endpoint(id) ON DELETE CASCADE
) PARTITION BY RANGE (delivery_id);
CREATE INDEX webhook_attempt_delivery_id ON ONLY public.webhook_attempt USING btree (delivery_id);
CREATE INDEX webhook_attempt_endpoint_id_id ON ONLY public.webhook_attempt USING btree (endpoint_id, id);

CREATE TABLE "webhook_delivery" (
    "id" character varying(26) NOT NULL,
    "endpoint_id" character varying(26) NOT NULL,
    "event_ids" text NOT NULL,
    "body" text NOT NULL,
    "status" character varying(16) NOT NULL,
    "attempts" integer NOT NULL,
    "created_at" bigint NOT NULL,
    "next_attempt_at" bigint,
    "lease_owner" character varying(64),
    "lease_expires_at" bigint,
    CONSTRAINT "webhook_delivery_pkey" PRIMARY KEY (id),
    CONSTRAINT "webhook_delivery_endpoint_id_fkey" FOREIGN KEY (endpoint_id) REFERENCES webhook_endpoint(id) ON DELETE CASCADE
) PARTITION BY RANGE (id);
CREATE INDEX webhook_delivery_endpoint_id ON ONLY public.webhook_delivery USING btree (endpoint_id);
CREATE INDEX webhook_delivery_next_attempt_at ON ONLY public.webhook_delivery USING btree (next_attempt_at);
CREATE INDEX webhook_delivery_pending_endpoint_id ON ONLY public.webhook_delivery USING btree (endpoint_id, id) WHERE ((status)::text = 'pending'::text);
CREATE TRIGGER webhook_delivery_notify AFTER INSERT ON public.webhook_delivery REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION webhook_notify();

CREATE TABLE "webhook_endpoint" (
    "id" character varying(26) NOT NULL,
    "account_id" integer NOT NULL,
    "url" text NOT NULL,
    "description" text NOT NULL,
    "events" text NOT NULL,
    "secret" bytea NOT NULL,
    "previous_secret" bytea,
    "previous_secret_expires_at" bigint,
    "created_at" bigint NOT NULL,
    "updated_at" bigint NOT NULL,
    "disabled_at" bigint,
    "disabled_reason" text,
    "failing_since" bigint,
    "kind" character varying(16) DEFAULT 'events'::character varying NOT NULL,
    CONSTRAINT "webhook_endpoint_pkey" PRIMARY KEY (id),
    CONSTRAINT "webhook_endpoint_account_id_fkey" FOREIGN KEY (account_id) REFERENCES account(id) ON DELETE CASCADE
);
CREATE INDEX webhook_endpoint_account_id ON public.webhook_endpoint USING btree (account_id);

CREATE TABLE "webhook_event" (
    "id" integer DEFAULT nextval('webhook_event_id_seq'::regclass) NOT NULL,
    "event_id" character varying(32) NOT NULL,
    "endpoint_id" character varying(26) NOT NULL,
    "recipient_id" character varying(26),
    "status" character varying(16) NOT NULL,
    "created_at" bigint NOT NULL,
    "detail" text NOT NULL,
    "delivery_id" character varying(26),
    CONSTRAINT "webhook_event_pkey" PRIMARY KEY (id, created_at),
    CONSTRAINT "webhook_event_endpoint_id_fkey" FOREIGN KEY (endpoint_id) REFERENCES webhook_endpoint(id) ON DELETE CASCADE
) PARTITION BY RANGE (created_at);
CREATE SEQUENCE "webhook_event_id_seq" AS integer OWNED BY "webhook_event"."id";
CREATE INDEX webhook_event_delivery_id_id ON ONLY public.webhook_event USING btree (delivery_id, id);
CREATE INDEX webhook_event_endpoint_id_recipient_id ON ONLY public.webhook_event USING btree (endpoint_id, recipient_id);
CREATE TRIGGER webhook_event_notify AFTER INSERT ON public.webhook_event REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION webhook_notify();

-- =================================================================================================
-- SQLite
-- =================================================================================================

CREATE TABLE "account" (
    "id" INTEGER NOT NULL PRIMARY KEY,
    "name" VARCHAR(64) NOT NULL,
    "mode" VARCHAR(16) NOT NULL,
    "created_at" INTEGER NOT NULL, "retention_days" INTEGER, "content_days" INTEGER, "store_content" INTEGER NOT NULL DEFAULT TRUE, "two_factor_required_at" INTEGER);
CREATE UNIQUE INDEX "account_name" ON "account" ("name");

CREATE TABLE "activity_count" (
    "id" INTEGER NOT NULL PRIMARY KEY,
    "account_id" INTEGER NOT NULL,
    "hour" INTEGER NOT NULL,
    "domain" VARCHAR(253) NOT NULL,
    "kind" VARCHAR(32) NOT NULL,
    "count" INTEGER NOT NULL, "stream" VARCHAR(16) NOT NULL DEFAULT 'transactional',
    FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE);
CREATE UNIQUE INDEX "activity_count_account_id_hour_domain_stream_kind" ON "activity_count" ("account_id", "hour", "domain", "stream", "kind");

CREATE TABLE "activity_tag_count" (
    "id" INTEGER NOT NULL PRIMARY KEY,
    "account_id" INTEGER NOT NULL,
    "hour" INTEGER NOT NULL,
    "tag" VARCHAR(64) NOT NULL,
    "kind" VARCHAR(32) NOT NULL,
    "count" INTEGER NOT NULL,
    FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE);
CREATE UNIQUE INDEX "activity_tag_count_account_id_hour_tag_kind" ON "activity_tag_count" ("account_id", "hour", "tag", "kind");

CREATE TABLE "api_key" (
    "id" VARCHAR(32) NOT NULL PRIMARY KEY,
    "account_id" INTEGER NOT NULL,
    "label" VARCHAR(200) NOT NULL,
    "prefix" VARCHAR(16) NOT NULL,
    "secret_hash" VARCHAR(64) NOT NULL,
    "created_at" INTEGER NOT NULL,
    "revoked_at" INTEGER, "scope" VARCHAR(8) NOT NULL DEFAULT 'full',
    FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE);
CREATE INDEX "api_key_account_id" ON "api_key" ("account_id");
CREATE UNIQUE INDEX "api_key_secret_hash" ON "api_key" ("secret_hash");

CREATE TABLE "audit_entry" ("id" INTEGER NOT NULL PRIMARY KEY, "account_id" INTEGER REFERENCES "account" ("id") ON DELETE CASCADE, "at" INTEGER NOT NULL, "actor" VARCHAR(320) NOT NULL, "action" VARCHAR(64) NOT NULL, "target" VARCHAR(512) NOT NULL, "source" VARCHAR(64) NOT NULL, "detail" TEXT NOT NULL);
CREATE INDEX "audit_entry_account_id_at" ON "audit_entry" ("account_id", "at");
CREATE INDEX "audit_entry_at" ON "audit_entry" ("at");

CREATE TABLE "authorized_recipient" (
    "id" VARCHAR(26) NOT NULL PRIMARY KEY,
    "account_id" INTEGER NOT NULL,
    "email" VARCHAR(320) NOT NULL,
    "email_key" VARCHAR(320) NOT NULL,
    "name" VARCHAR(256),
    "status" VARCHAR(16) NOT NULL,
    "created_at" INTEGER NOT NULL,
    "verified_at" INTEGER,
    "token_hash" VARCHAR(64),
    "token_expires_at" INTEGER,
    FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE);
CREATE INDEX "authorized_recipient_account_id" ON "authorized_recipient" ("account_id");
CREATE UNIQUE INDEX "authorized_recipient_account_id_email_key" ON "authorized_recipient" ("account_id", "email_key");
CREATE UNIQUE INDEX "authorized_recipient_token_hash" ON "authorized_recipient" ("token_hash");

CREATE TABLE "breaker_count" (
    "id" INTEGER NOT NULL PRIMARY KEY,
    "account_id" INTEGER NOT NULL,
    "domain" VARCHAR(253) NOT NULL,
    "bucket" INTEGER NOT NULL,
    "sent" INTEGER NOT NULL,
    "hard_bounces" INTEGER NOT NULL,
    "complaints" INTEGER NOT NULL,
    FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE);
CREATE UNIQUE INDEX "breaker_count_account_id_domain_bucket" ON "breaker_count" ("account_id", "domain", "bucket");

CREATE TABLE "breaker_state" (
    "id" INTEGER NOT NULL PRIMARY KEY,
    "account_id" INTEGER NOT NULL,
    "domain" VARCHAR(253) NOT NULL,
    "level" INTEGER NOT NULL,
    "reason" TEXT NOT NULL,
    "changed_at" INTEGER NOT NULL,
    FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE);
CREATE UNIQUE INDEX "breaker_state_account_id_domain" ON "breaker_state" ("account_id", "domain");

CREATE TABLE "console_session" (
    "id" VARCHAR(64) NOT NULL PRIMARY KEY,
    "key_id" VARCHAR(32) NOT NULL,
    "created_at" INTEGER NOT NULL,
    "expires_at" INTEGER NOT NULL,
    FOREIGN KEY ("key_id") REFERENCES "api_key" ("id") ON DELETE CASCADE);
CREATE INDEX "console_session_expires_at" ON "console_session" ("expires_at");
CREATE INDEX "console_session_key_id" ON "console_session" ("key_id");

CREATE TABLE "console_user" (
    "id" VARCHAR(32) NOT NULL PRIMARY KEY,
    "email" VARCHAR(320) NOT NULL,
    "email_key" VARCHAR(320) NOT NULL,
    "password_hash" VARCHAR(255),
    "totp_seed" BLOB,
    "totp_last_step" INTEGER,
    "failed_passwords" INTEGER NOT NULL DEFAULT 0,
    "locked_until" INTEGER,
    "created_at" INTEGER NOT NULL,
    "password_changed_at" INTEGER);
CREATE UNIQUE INDEX "console_user_email_key" ON "console_user" ("email_key");

CREATE TABLE "dkim_key" (
    "id" INTEGER NOT NULL PRIMARY KEY,
    "sending_domain_id" INTEGER NOT NULL,
    "selector" VARCHAR(63) NOT NULL,
    "algorithm" VARCHAR(16) NOT NULL,
    "bits" INTEGER NOT NULL,
    "status" VARCHAR(16) NOT NULL,
    "public_key" TEXT NOT NULL,
    "private_key" BLOB NOT NULL,
    "created_at" INTEGER NOT NULL,
    "activated_at" INTEGER,
    FOREIGN KEY ("sending_domain_id") REFERENCES "sending_domain" ("id")
        ON DELETE CASCADE);
CREATE INDEX "dkim_key_sending_domain_id" ON "dkim_key" ("sending_domain_id");
CREATE UNIQUE INDEX "dkim_key_sending_domain_id_selector" ON "dkim_key" ("sending_domain_id", "selector");

CREATE TABLE "dmarc_record" (
    "id" INTEGER NOT NULL PRIMARY KEY,
    "report_id" INTEGER NOT NULL,
    "domain" VARCHAR(253) NOT NULL,
    "begins_at" INTEGER NOT NULL,
    "source_ip" VARCHAR(45) NOT NULL,
    "count" INTEGER NOT NULL,
    "disposition" VARCHAR(16) NOT NULL,
    "dkim" VARCHAR(16) NOT NULL,
    "spf" VARCHAR(16) NOT NULL,
    "dkim_aligned" INTEGER NOT NULL,
    "spf_aligned" INTEGER NOT NULL,
    "header_from" VARCHAR(253) NOT NULL,
    "dkim_domains" TEXT NOT NULL,
    FOREIGN KEY ("report_id") REFERENCES "dmarc_report" ("id") ON DELETE CASCADE);
CREATE INDEX "dmarc_record_domain_begins_at" ON "dmarc_record" ("domain", "begins_at");
CREATE INDEX "dmarc_record_report_id" ON "dmarc_record" ("report_id");

CREATE TABLE "dmarc_report" (
    "id" INTEGER NOT NULL PRIMARY KEY,
    "domain" VARCHAR(253) NOT NULL,
    "org_name" TEXT NOT NULL,
    "report_id" VARCHAR(255) NOT NULL,
    "begins_at" INTEGER NOT NULL,
    "ends_at" INTEGER NOT NULL,
    "received_at" INTEGER NOT NULL, "account_id" INTEGER REFERENCES "account" ("id") ON DELETE CASCADE);
CREATE INDEX "dmarc_report_account_id" ON "dmarc_report" ("account_id");
CREATE INDEX "dmarc_report_domain" ON "dmarc_report" ("domain");
CREATE UNIQUE INDEX "dmarc_report_org_name_report_id" ON "dmarc_report" ("org_name", "report_id");

CREATE TABLE "event" (
    "id" INTEGER NOT NULL PRIMARY KEY,
    "recipient_id" VARCHAR(26) NOT NULL,
    "status" VARCHAR(16) NOT NULL,
    "created_at" INTEGER NOT NULL,
    "detail" TEXT NOT NULL,
    FOREIGN KEY ("recipient_id") REFERENCES "recipient" ("id") ON DELETE CASCADE);
CREATE INDEX "event_recipient_id" ON "event" ("recipient_id");
CREATE TRIGGER "activity_count_event" AFTER INSERT ON "event" BEGIN
      INSERT INTO "activity_count" ("account_id", "hour", "domain", "stream", "kind", "count")
      SELECT r."account_id", NEW."created_at" / 3600000 * 3600000, coalesce(lower(substr(json_extract(CASE WHEN json_valid(t."from_header") THEN t."from_header" END, '$.email'), length(rtrim(json_extract(CASE WHEN json_valid(t."from_header") THEN t."from_header" END, '$.email'), replace(json_extract(CASE WHEN json_valid(t."from_header") THEN t."from_header" END, '$.email'), '@', ''))) + 1)), ''),
             CASE WHEN r."priority" = 1 THEN 'broadcast' ELSE 'transactional' END, CASE WHEN NEW."status" = 'Bounce' THEN 'Bounce:' || coalesce(json_extract(CASE WHEN json_valid(NEW."detail") THEN NEW."detail" END, '$.bounceClass'), 'undetermined') ELSE NEW."status" END, 1
      FROM "recipient" r JOIN "transmission" t ON t."id" = r."transmission_id"
      WHERE r."id" = NEW."recipient_id"
      ON CONFLICT ("account_id", "hour", "domain", "stream", "kind") DO UPDATE SET "count" = "count" + 1;
END;
CREATE TRIGGER "activity_tag_count_event" AFTER INSERT ON "event" BEGIN
      INSERT INTO "activity_tag_count" ("account_id", "hour", "tag", "kind", "count")
      SELECT r."account_id", NEW."created_at" / 3600000 * 3600000, g."tag",
             CASE WHEN NEW."status" = 'Bounce' THEN 'Bounce:' || coalesce(json_extract(CASE WHEN json_valid(NEW."detail") THEN NEW."detail" END, '$.bounceClass'), 'undetermined') ELSE NEW."status" END, 1
      FROM "recipient" r
      JOIN "transmission_tag" g ON g."transmission_id" = r."transmission_id"
      WHERE r."id" = NEW."recipient_id"
      ON CONFLICT ("account_id", "hour", "tag", "kind") DO UPDATE SET "count" = "count" + 1;
END;

CREATE TABLE "idempotency_answer" (
    "id" INTEGER NOT NULL PRIMARY KEY,
    "account_id" INTEGER NOT NULL,
    "key" VARCHAR(255) NOT NULL,
    "fingerprint" VARCHAR(64) NOT NULL,
    "status" INTEGER NOT NULL,
    "body" TEXT NOT NULL,
    "expires_at" INTEGER NOT NULL,
    FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE);
CREATE UNIQUE INDEX "idempotency_answer_account_id_key" ON "idempotency_answer" ("account_id", "key");
CREATE INDEX "idempotency_answer_expires_at" ON "idempotency_answer" ("expires_at");

CREATE TABLE "idempotency_key" (
    "id" INTEGER NOT NULL PRIMARY KEY,
    "account_id" INTEGER NOT NULL,
    "key" VARCHAR(255) NOT NULL,
    "fingerprint" VARCHAR(64) NOT NULL,
    "token" VARCHAR(32) NOT NULL,
    "claimed_at" INTEGER NOT NULL,
    "expires_at" INTEGER NOT NULL,
    FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE);
CREATE UNIQUE INDEX "idempotency_key_account_id_key" ON "idempotency_key" ("account_id", "key");
CREATE INDEX "idempotency_key_expires_at" ON "idempotency_key" ("expires_at");

CREATE TABLE "inbound_domain" ("id" INTEGER NOT NULL PRIMARY KEY, "account_id" INTEGER NOT NULL REFERENCES "account" ("id") ON DELETE CASCADE, "domain" VARCHAR(253) NOT NULL, "status" VARCHAR(16) NOT NULL, "records" TEXT NOT NULL, "created_at" INTEGER NOT NULL, "checked_at" INTEGER, "verified_at" INTEGER);
CREATE INDEX "inbound_domain_account_id" ON "inbound_domain" ("account_id");
CREATE UNIQUE INDEX "inbound_domain_account_id_domain" ON "inbound_domain" ("account_id", "domain");
CREATE UNIQUE INDEX "inbound_domain_verified_domain" ON "inbound_domain" ("domain") WHERE "status" = 'verified';

CREATE TABLE "inbound_email" ("id" VARCHAR(26) NOT NULL PRIMARY KEY, "account_id" INTEGER NOT NULL REFERENCES "account" ("id") ON DELETE CASCADE, "route_id" VARCHAR(26) REFERENCES "inbound_route" ("id") ON DELETE SET NULL, "route_match" VARCHAR(320) NOT NULL, "action" VARCHAR(16) NOT NULL, "received_at" INTEGER NOT NULL, "mail_from" VARCHAR(512) NOT NULL, "rcpt_to" TEXT NOT NULL, "from_header" TEXT NOT NULL, "subject" TEXT NOT NULL, "size" INTEGER NOT NULL, "spam_score" REAL, "note" TEXT, "payload" TEXT NOT NULL, "raw" BLOB NOT NULL, "delivery_id" VARCHAR(26), "deliveries" TEXT NOT NULL);
CREATE INDEX "inbound_email_account_id" ON "inbound_email" ("account_id");
CREATE INDEX "inbound_email_account_id_id" ON "inbound_email" ("account_id", "id");
CREATE INDEX "inbound_email_received_at" ON "inbound_email" ("received_at");
CREATE INDEX "inbound_email_route_id" ON "inbound_email" ("route_id");

CREATE TABLE "inbound_message" (
    "id" INTEGER NOT NULL PRIMARY KEY,
    "received_at" INTEGER NOT NULL,
    "mail_from" TEXT NOT NULL,
    "rcpt_to" TEXT NOT NULL,
    "size" INTEGER NOT NULL,
    "raw" BLOB NOT NULL,
    "reason" TEXT NOT NULL);
CREATE INDEX "inbound_message_received_at" ON "inbound_message" ("received_at");

CREATE TABLE "inbound_route" ("id" VARCHAR(26) NOT NULL PRIMARY KEY, "account_id" INTEGER NOT NULL REFERENCES "account" ("id") ON DELETE CASCADE, "domain_id" INTEGER NOT NULL REFERENCES "inbound_domain" ("id") ON DELETE CASCADE, "local_part" VARCHAR(64) NOT NULL, "action" VARCHAR(16) NOT NULL, "endpoint_id" VARCHAR(26) REFERENCES "webhook_endpoint" ("id") ON DELETE SET NULL, "spam_threshold" REAL, "created_at" INTEGER NOT NULL);
CREATE INDEX "inbound_route_account_id" ON "inbound_route" ("account_id");
CREATE INDEX "inbound_route_domain_id" ON "inbound_route" ("domain_id");
CREATE UNIQUE INDEX "inbound_route_domain_id_local_part" ON "inbound_route" ("domain_id", "local_part");
CREATE INDEX "inbound_route_endpoint_id" ON "inbound_route" ("endpoint_id");

CREATE TABLE "membership" (
    "id" INTEGER NOT NULL PRIMARY KEY,
    "user_id" VARCHAR(32) NOT NULL,
    "account_id" INTEGER NOT NULL,
    "role" VARCHAR(16) NOT NULL,
    "created_at" INTEGER NOT NULL,
    FOREIGN KEY ("user_id") REFERENCES "console_user" ("id") ON DELETE CASCADE,
    FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE);
CREATE INDEX "membership_account_id" ON "membership" ("account_id");
CREATE UNIQUE INDEX "membership_user_id_account_id" ON "membership" ("user_id", "account_id");

CREATE TABLE "mta_sts_policy" (
    "domain" VARCHAR(255) NOT NULL PRIMARY KEY,
    "policy_id" VARCHAR(32) NOT NULL,
    "mode" VARCHAR(16) NOT NULL,
    "mx" TEXT NOT NULL,
    "max_age" INTEGER NOT NULL,
    "text" TEXT NOT NULL,
    "fetched_at" INTEGER NOT NULL,
    "expires_at" INTEGER NOT NULL);

CREATE TABLE "mx_domain" (
    "domain" VARCHAR(253) NOT NULL PRIMARY KEY,
    "site" TEXT NOT NULL,
    "expires_at" INTEGER NOT NULL);
CREATE INDEX "mx_domain_site" ON "mx_domain" ("site");

CREATE TABLE "passkey" (
    "id" VARCHAR(1400) NOT NULL PRIMARY KEY,
    "user_id" VARCHAR(32) NOT NULL,
    "public_key" BLOB NOT NULL,
    "sign_count" INTEGER NOT NULL,
    "label" VARCHAR(100) NOT NULL,
    "created_at" INTEGER NOT NULL,
    "used_at" INTEGER,
    FOREIGN KEY ("user_id") REFERENCES "console_user" ("id") ON DELETE CASCADE);
CREATE INDEX "passkey_user_id" ON "passkey" ("user_id");

CREATE TABLE "payload_chunk" (
    "transmission_id" VARCHAR(26) NOT NULL,
    "seq" INTEGER NOT NULL,
    "text" TEXT NOT NULL,
    PRIMARY KEY ("transmission_id", "seq"),
    FOREIGN KEY ("transmission_id") REFERENCES "transmission" ("id") ON DELETE CASCADE);

CREATE TABLE "rate_window" (
    "id" INTEGER NOT NULL PRIMARY KEY,
    "account_id" INTEGER NOT NULL,
    "starts_at" INTEGER NOT NULL,
    "ends_at" INTEGER NOT NULL,
    "count" INTEGER NOT NULL,
    FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE);
CREATE UNIQUE INDEX "rate_window_account_id_starts_at" ON "rate_window" ("account_id", "starts_at");
CREATE INDEX "rate_window_ends_at" ON "rate_window" ("ends_at");

CREATE TABLE "recipient" (
    "id" VARCHAR(26) NOT NULL PRIMARY KEY,
    "transmission_id" VARCHAR(26) NOT NULL,
    "account_id" INTEGER NOT NULL,
    "address" VARCHAR(320) NOT NULL,
    "recipient_type" VARCHAR(3) NOT NULL,
    "status" VARCHAR(16) NOT NULL,
    "created_at" INTEGER NOT NULL,
    "updated_at" INTEGER NOT NULL,
    "attempts" INTEGER NOT NULL,
    "next_attempt_at" INTEGER,
    "lease_owner" VARCHAR(64),
    "lease_expires_at" INTEGER, "domain" TEXT, "waiting_on" TEXT, "priority" INTEGER NOT NULL DEFAULT 0, "content" TEXT, "metadata" TEXT, "scheduled_at" INTEGER,
    FOREIGN KEY ("transmission_id") REFERENCES "transmission" ("id") ON DELETE CASCADE,
    FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE);
CREATE INDEX "recipient_account_id_id" ON "recipient" ("account_id", "id");
CREATE INDEX "recipient_account_id_status_id" ON "recipient" ("account_id", "status", "id");
CREATE INDEX "recipient_domain_next_attempt_at" ON "recipient" ("domain", "next_attempt_at");
CREATE INDEX "recipient_next_attempt_at" ON "recipient" ("next_attempt_at");
CREATE INDEX "recipient_priority_next_attempt_at" ON "recipient" ("priority", "next_attempt_at");
CREATE INDEX "recipient_scheduled_at" ON "recipient" ("scheduled_at");
CREATE INDEX "recipient_transmission_id" ON "recipient" ("transmission_id");
CREATE INDEX "recipient_waiting_on" ON "recipient" ("waiting_on");
CREATE TRIGGER "activity_count_sent" AFTER INSERT ON "recipient"
    WHEN NEW."status" = 'Injection' BEGIN
      INSERT INTO "activity_count" ("account_id", "hour", "domain", "stream", "kind", "count")
      SELECT NEW."account_id", NEW."created_at" / 3600000 * 3600000, coalesce(lower(substr(json_extract(CASE WHEN json_valid(t."from_header") THEN t."from_header" END, '$.email'), length(rtrim(json_extract(CASE WHEN json_valid(t."from_header") THEN t."from_header" END, '$.email'), replace(json_extract(CASE WHEN json_valid(t."from_header") THEN t."from_header" END, '$.email'), '@', ''))) + 1)), ''),
             CASE WHEN NEW."priority" = 1 THEN 'broadcast' ELSE 'transactional' END, 'Injection', 1
      FROM "transmission" t WHERE t."id" = NEW."transmission_id"
      ON CONFLICT ("account_id", "hour", "domain", "stream", "kind") DO UPDATE SET "count" = "count" + 1;
END;
CREATE TRIGGER "activity_tag_count_sent" AFTER INSERT ON "recipient"
    WHEN NEW."status" = 'Injection' BEGIN
      INSERT INTO "activity_tag_count" ("account_id", "hour", "tag", "kind", "count")
      SELECT NEW."account_id", NEW."created_at" / 3600000 * 3600000, g."tag",
             'Injection', 1
      FROM "transmission_tag" g WHERE g."transmission_id" = NEW."transmission_id"
      ON CONFLICT ("account_id", "hour", "tag", "kind") DO UPDATE SET "count" = "count" + 1;
END;

CREATE TABLE "schema_version" ("version" INTEGER NOT NULL PRIMARY KEY, "applied_at" INTEGER NOT NULL);

CREATE TABLE "sending_domain" (
    "id" INTEGER NOT NULL PRIMARY KEY,
    "account_id" INTEGER NOT NULL,
    "domain" VARCHAR(253) NOT NULL,
    "return_path_domain" VARCHAR(253) NOT NULL,
    "status" VARCHAR(16) NOT NULL,
    "records" TEXT NOT NULL,
    "created_at" INTEGER NOT NULL,
    "checked_at" INTEGER,
    "verified_at" INTEGER,
    FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE);
CREATE INDEX "sending_domain_account_id" ON "sending_domain" ("account_id");
CREATE UNIQUE INDEX "sending_domain_account_id_domain" ON "sending_domain" ("account_id", "domain");
CREATE UNIQUE INDEX "sending_domain_verified_domain" ON "sending_domain" ("domain") WHERE ("status" = 'verified');

CREATE TABLE "sign_in_window" (
    "key" VARCHAR(400) NOT NULL,
    "starts_at" INTEGER NOT NULL,
    "ends_at" INTEGER NOT NULL,
    "count" INTEGER NOT NULL,
    PRIMARY KEY ("key", "starts_at"));
CREATE INDEX "sign_in_window_ends_at" ON "sign_in_window" ("ends_at");

CREATE TABLE "site_slot" (
    "id" VARCHAR(26) NOT NULL PRIMARY KEY,
    "site" VARCHAR(1000) NOT NULL,
    "owner" VARCHAR(64) NOT NULL,
    "expires_at" INTEGER NOT NULL);
CREATE INDEX "site_slot_owner" ON "site_slot" ("owner");
CREATE INDEX "site_slot_site_expires_at" ON "site_slot" ("site", "expires_at");

CREATE TABLE "site_state" (
    "site" VARCHAR(1000) NOT NULL PRIMARY KEY,
    "connection_limit" INTEGER,
    "rule_limit" INTEGER,
    "state" VARCHAR(16) NOT NULL,
    "until_ms" INTEGER,
    "reason" TEXT,
    "last_reply" TEXT,
    "pause_ms" INTEGER NOT NULL,
    "signal_at" INTEGER,
    "failures" INTEGER NOT NULL,
    "rate_tat_us" INTEGER,
    "updated_at" INTEGER NOT NULL, "wanted_at" INTEGER, "wanted_by" VARCHAR(64));

CREATE TABLE "suppression" (
    "id" VARCHAR(26) NOT NULL PRIMARY KEY,
    "account_id" INTEGER NOT NULL,
    "email" VARCHAR(320) NOT NULL,
    "email_key" VARCHAR(320) NOT NULL,
    "reason" VARCHAR(16) NOT NULL,
    "transmission_id" VARCHAR(26),
    "detail" TEXT NOT NULL,
    "note" TEXT NOT NULL,
    "created_at" INTEGER NOT NULL,
    FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE);
CREATE UNIQUE INDEX "suppression_account_id_email_key" ON "suppression" ("account_id", "email_key");
CREATE INDEX "suppression_account_id_id" ON "suppression" ("account_id", "id");

CREATE TABLE "template" (
    "id" INTEGER NOT NULL PRIMARY KEY,
    "account_id" INTEGER NOT NULL,
    "template_id" VARCHAR(64) NOT NULL,
    "name" TEXT NOT NULL,
    "current_version" INTEGER NOT NULL,
    "created_at" INTEGER NOT NULL,
    "updated_at" INTEGER NOT NULL);
CREATE INDEX "template_account_id" ON "template" ("account_id");
CREATE UNIQUE INDEX "template_account_id_template_id" ON "template" ("account_id", "template_id");

CREATE TABLE "template_version" (
    "id" INTEGER NOT NULL PRIMARY KEY,
    "template_id" INTEGER NOT NULL,
    "version" INTEGER NOT NULL,
    "revision" VARCHAR(32) NOT NULL,
    "name" TEXT NOT NULL,
    "subject" TEXT,
    "source_html" TEXT,
    "body_html" TEXT,
    "body_text" TEXT,
    "shortcodes" TEXT NOT NULL,
    "created_at" INTEGER NOT NULL,
    FOREIGN KEY ("template_id") REFERENCES "template" ("id") ON DELETE CASCADE);
CREATE UNIQUE INDEX "template_version_revision" ON "template_version" ("revision");
CREATE INDEX "template_version_template_id" ON "template_version" ("template_id");
CREATE UNIQUE INDEX "template_version_template_id_version" ON "template_version" ("template_id", "version");

CREATE TABLE "tls_report" (
    "id" INTEGER NOT NULL PRIMARY KEY,
    "day" VARCHAR(10) NOT NULL,
    "policy_domain" VARCHAR(255) NOT NULL,
    "status" VARCHAR(16) NOT NULL,
    "report_id" VARCHAR(200) NOT NULL,
    "rua" TEXT NOT NULL,
    "detail" TEXT NOT NULL,
    "created_at" INTEGER NOT NULL);
CREATE UNIQUE INDEX "tls_report_day_policy_domain" ON "tls_report" ("day", "policy_domain");

CREATE TABLE "tls_session_result" (
    "id" INTEGER NOT NULL PRIMARY KEY,
    "row_key" VARCHAR(64) NOT NULL,
    "day" VARCHAR(10) NOT NULL,
    "policy_domain" VARCHAR(255) NOT NULL,
    "policy_type" VARCHAR(16) NOT NULL,
    "policy_strings" TEXT NOT NULL,
    "mx_host" VARCHAR(255) NOT NULL,
    "result_type" VARCHAR(40) NOT NULL,
    "detail" TEXT NOT NULL,
    "sessions" INTEGER NOT NULL,
    "updated_at" INTEGER NOT NULL);
CREATE INDEX "tls_session_result_day_policy_domain" ON "tls_session_result" ("day", "policy_domain");
CREATE UNIQUE INDEX "tls_session_result_row_key" ON "tls_session_result" ("row_key");

CREATE TABLE "tracking_domain" ("id" INTEGER NOT NULL PRIMARY KEY, "account_id" INTEGER NOT NULL REFERENCES "account" ("id") ON DELETE CASCADE, "domain" VARCHAR(253) NOT NULL, "status" VARCHAR(16) NOT NULL, "created_at" INTEGER NOT NULL, "checked_at" INTEGER, "found" TEXT);
CREATE UNIQUE INDEX "tracking_domain_account_id_domain" ON "tracking_domain" ("account_id", "domain");
CREATE INDEX "tracking_domain_domain_status" ON "tracking_domain" ("domain", "status");

CREATE TABLE "transmission" (
    "id" VARCHAR(26) NOT NULL PRIMARY KEY,
    "account_id" INTEGER NOT NULL,
    "created_at" INTEGER NOT NULL,
    "source" VARCHAR(8) NOT NULL,
    "mail_from" VARCHAR(320) NOT NULL,
    "from_header" TEXT NOT NULL,
    "subject" TEXT NOT NULL,
    "message_id" VARCHAR(400) NOT NULL,
    "metadata" TEXT NOT NULL,
    "payload" TEXT,
    "raw" BLOB, "stream" VARCHAR(16) NOT NULL DEFAULT 'transactional', "from_domain" VARCHAR(253) NOT NULL DEFAULT '', "tls_requirement" VARCHAR(16), "content_expired_at" INTEGER, "personalized" INTEGER NOT NULL DEFAULT 0, "tags" TEXT, "scheduled_at" INTEGER,
    FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE);
CREATE INDEX "transmission_account_id" ON "transmission" ("account_id");
CREATE INDEX "transmission_content_kept" ON "transmission" ("account_id", "id") WHERE "content_expired_at" IS NULL;

CREATE TABLE "transmission_tag" (
    "transmission_id" VARCHAR(26) NOT NULL,
    "account_id" INTEGER NOT NULL,
    "tag" VARCHAR(64) NOT NULL,
    PRIMARY KEY ("transmission_id", "tag"),
    FOREIGN KEY ("transmission_id") REFERENCES "transmission" ("id") ON DELETE CASCADE,
    FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE);
CREATE INDEX "transmission_tag_account_id_tag_transmission_id" ON "transmission_tag" ("account_id", "tag", "transmission_id");
CREATE INDEX "transmission_tag_transmission_id" ON "transmission_tag" ("transmission_id");

CREATE TABLE "user_session" (
    "id" VARCHAR(64) NOT NULL PRIMARY KEY,
    "user_id" VARCHAR(32) NOT NULL,
    "account_id" INTEGER,
    "created_at" INTEGER NOT NULL,
    "seen_at" INTEGER NOT NULL,
    "expires_at" INTEGER NOT NULL,
    "source" VARCHAR(64) NOT NULL,
    "user_agent" VARCHAR(200) NOT NULL,
    FOREIGN KEY ("user_id") REFERENCES "console_user" ("id") ON DELETE CASCADE,
    FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE SET NULL);
CREATE INDEX "user_session_expires_at" ON "user_session" ("expires_at");
CREATE INDEX "user_session_user_id" ON "user_session" ("user_id");

CREATE TABLE "user_token" (
    "id" VARCHAR(64) NOT NULL PRIMARY KEY,
    "purpose" VARCHAR(16) NOT NULL,
    "email" VARCHAR(320) NOT NULL,
    "user_id" VARCHAR(32),
    "account_id" INTEGER,
    "role" VARCHAR(16),
    "created_by" VARCHAR(320) NOT NULL,
    "created_at" INTEGER NOT NULL,
    "expires_at" INTEGER NOT NULL,
    "used_at" INTEGER,
    FOREIGN KEY ("user_id") REFERENCES "console_user" ("id") ON DELETE CASCADE,
    FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE);
CREATE INDEX "user_token_account_id" ON "user_token" ("account_id");
CREATE INDEX "user_token_expires_at" ON "user_token" ("expires_at");

CREATE TABLE "webhook_attempt" (
    "id" VARCHAR(26) NOT NULL PRIMARY KEY,
    "delivery_id" VARCHAR(26) NOT NULL,
    "endpoint_id" VARCHAR(26) NOT NULL,
    "attempted_at" INTEGER NOT NULL,
    "status" VARCHAR(16) NOT NULL,
    "response_status" INTEGER,
    "error" TEXT,
    "next_attempt_at" INTEGER,
    FOREIGN KEY ("delivery_id") REFERENCES "webhook_delivery" ("id") ON DELETE CASCADE,
    FOREIGN KEY ("endpoint_id") REFERENCES "webhook_endpoint" ("id") ON DELETE CASCADE);
CREATE INDEX "webhook_attempt_delivery_id" ON "webhook_attempt" ("delivery_id");
CREATE INDEX "webhook_attempt_endpoint_id_id" ON "webhook_attempt" ("endpoint_id", "id");

CREATE TABLE "webhook_delivery" (
    "id" VARCHAR(26) NOT NULL PRIMARY KEY,
    "endpoint_id" VARCHAR(26) NOT NULL,
    "event_ids" TEXT NOT NULL,
    "body" TEXT NOT NULL,
    "status" VARCHAR(16) NOT NULL,
    "attempts" INTEGER NOT NULL,
    "created_at" INTEGER NOT NULL,
    "next_attempt_at" INTEGER,
    "lease_owner" VARCHAR(64),
    "lease_expires_at" INTEGER,
    FOREIGN KEY ("endpoint_id") REFERENCES "webhook_endpoint" ("id") ON DELETE CASCADE);
CREATE INDEX "webhook_delivery_endpoint_id" ON "webhook_delivery" ("endpoint_id");
CREATE INDEX "webhook_delivery_next_attempt_at" ON "webhook_delivery" ("next_attempt_at");
CREATE INDEX "webhook_delivery_pending_endpoint_id" ON "webhook_delivery" ("endpoint_id", "id") WHERE "status" = 'pending';

CREATE TABLE "webhook_endpoint" (
    "id" VARCHAR(26) NOT NULL PRIMARY KEY,
    "account_id" INTEGER NOT NULL,
    "url" TEXT NOT NULL,
    "description" TEXT NOT NULL,
    "events" TEXT NOT NULL,
    "secret" BLOB NOT NULL,
    "previous_secret" BLOB,
    "previous_secret_expires_at" INTEGER,
    "created_at" INTEGER NOT NULL,
    "updated_at" INTEGER NOT NULL,
    "disabled_at" INTEGER,
    "disabled_reason" TEXT,
    "failing_since" INTEGER, "kind" VARCHAR(16) NOT NULL DEFAULT 'events',
    FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE);
CREATE INDEX "webhook_endpoint_account_id" ON "webhook_endpoint" ("account_id");

CREATE TABLE "webhook_event" (
    "id" INTEGER NOT NULL PRIMARY KEY,
    "event_id" VARCHAR(32) NOT NULL,
    "endpoint_id" VARCHAR(26) NOT NULL,
    "recipient_id" VARCHAR(26),
    "status" VARCHAR(16) NOT NULL,
    "created_at" INTEGER NOT NULL,
    "detail" TEXT NOT NULL,
    "delivery_id" VARCHAR(26),
    FOREIGN KEY ("endpoint_id") REFERENCES "webhook_endpoint" ("id") ON DELETE CASCADE);
CREATE INDEX "webhook_event_delivery_id_id" ON "webhook_event" ("delivery_id", "id");
CREATE INDEX "webhook_event_endpoint_id_recipient_id" ON "webhook_event" ("endpoint_id", "recipient_id");
