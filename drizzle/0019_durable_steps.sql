CREATE TABLE "subagent_batch_item_steps" (
	"item_id" uuid NOT NULL,
	"step" integer NOT NULL,
	"messages" jsonb NOT NULL,
	"tool_calls" jsonb NOT NULL,
	"lease_token" bigint NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "subagent_batch_item_steps_item_id_step_pk" PRIMARY KEY("item_id","step")
);
--> statement-breakpoint
CREATE TABLE "workspace_write_keys" (
	"thread_id" uuid NOT NULL,
	"idempotency_key" text NOT NULL,
	"path" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "workspace_write_keys_thread_id_idempotency_key_path_pk" PRIMARY KEY("thread_id","idempotency_key","path")
);
--> statement-breakpoint
ALTER TABLE "subagent_batch_item_steps" ADD CONSTRAINT "subagent_batch_item_steps_item_id_subagent_batch_items_id_fk" FOREIGN KEY ("item_id") REFERENCES "public"."subagent_batch_items"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "workspace_write_keys" ADD CONSTRAINT "workspace_write_keys_thread_id_threads_id_fk" FOREIGN KEY ("thread_id") REFERENCES "public"."threads"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
-- The claim now says which items have stored steps to resume from (`resume`); its return type and
-- the worker pass's changed, so server/batches/sql/claim.sql and worker-pass.sql re-create them.
DROP FUNCTION IF EXISTS flotilla_worker_pass(text, jsonb, uuid[], bigint[], integer, integer, integer, double precision, integer);
--> statement-breakpoint
DROP FUNCTION IF EXISTS flotilla_claim(text, integer, integer, double precision, integer, boolean);
