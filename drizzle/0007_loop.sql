CREATE TABLE "batch_wakeups" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"batch_id" uuid NOT NULL,
	"thread_id" uuid NOT NULL,
	"user_id" uuid NOT NULL,
	"settlement_seq" integer NOT NULL,
	"settled_status" text NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"next_attempt_at" timestamp with time zone DEFAULT now() NOT NULL,
	"claimed_by" text,
	"claimed_at" timestamp with time zone,
	"lease_expires_at" timestamp with time zone,
	"done_at" timestamp with time zone,
	"message_id" text,
	"last_error" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "user_daily_tokens" (
	"user_id" uuid NOT NULL,
	"day" date NOT NULL,
	"tokens" bigint DEFAULT 0 NOT NULL,
	CONSTRAINT "user_daily_tokens_user_id_day_pk" PRIMARY KEY("user_id","day")
);
--> statement-breakpoint
CREATE TABLE "user_webhooks" (
	"user_id" uuid PRIMARY KEY NOT NULL,
	"url" text NOT NULL,
	"secret" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "webhook_deliveries" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"user_id" uuid NOT NULL,
	"batch_id" uuid NOT NULL,
	"settlement_seq" integer NOT NULL,
	"url" text NOT NULL,
	"body" jsonb NOT NULL,
	"status" text DEFAULT 'pending' NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"next_attempt_at" timestamp with time zone DEFAULT now() NOT NULL,
	"claimed_by" text,
	"lease_expires_at" timestamp with time zone,
	"last_status_code" integer,
	"last_error" text,
	"delivered_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "subagent_batches" ADD COLUMN "max_total_tokens" bigint;--> statement-breakpoint
ALTER TABLE "subagent_batches" ADD COLUMN "max_cost_usd" double precision;--> statement-breakpoint
ALTER TABLE "subagent_batches" ADD COLUMN "price_input_per_million" double precision DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "subagent_batches" ADD COLUMN "price_output_per_million" double precision DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "subagent_batches" ADD COLUMN "daily_token_quota" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "subagent_batches" ADD COLUMN "pause_reason" text;--> statement-breakpoint
ALTER TABLE "subagent_batches" ADD COLUMN "wake_lead" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "subagent_batches" ADD COLUMN "settlement_seq" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "subagent_batches" ADD COLUMN "unseen_settlement" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "batch_wakeups" ADD CONSTRAINT "batch_wakeups_batch_id_subagent_batches_id_fk" FOREIGN KEY ("batch_id") REFERENCES "public"."subagent_batches"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "batch_wakeups" ADD CONSTRAINT "batch_wakeups_thread_id_threads_id_fk" FOREIGN KEY ("thread_id") REFERENCES "public"."threads"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "batch_wakeups" ADD CONSTRAINT "batch_wakeups_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "user_daily_tokens" ADD CONSTRAINT "user_daily_tokens_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "user_webhooks" ADD CONSTRAINT "user_webhooks_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ADD CONSTRAINT "webhook_deliveries_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ADD CONSTRAINT "webhook_deliveries_batch_id_subagent_batches_id_fk" FOREIGN KEY ("batch_id") REFERENCES "public"."subagent_batches"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "batch_wakeups_settlement_uq" ON "batch_wakeups" USING btree ("batch_id","settlement_seq");--> statement-breakpoint
CREATE INDEX "batch_wakeups_pending_idx" ON "batch_wakeups" USING btree ("next_attempt_at") WHERE done_at is null;--> statement-breakpoint
CREATE INDEX "batch_wakeups_thread_idx" ON "batch_wakeups" USING btree ("thread_id") WHERE done_at is null;--> statement-breakpoint
CREATE UNIQUE INDEX "webhook_deliveries_settlement_uq" ON "webhook_deliveries" USING btree ("batch_id","settlement_seq","user_id");--> statement-breakpoint
CREATE INDEX "webhook_deliveries_pending_idx" ON "webhook_deliveries" USING btree ("next_attempt_at") WHERE status = 'pending';--> statement-breakpoint
CREATE INDEX "subagent_batch_item_attempts_recent_idx" ON "subagent_batch_item_attempts" USING btree ("batch_id","finished_at") WHERE outcome in ('succeeded', 'failed');--> statement-breakpoint
CREATE INDEX "subagent_batch_item_attempts_failed_idx" ON "subagent_batch_item_attempts" USING btree ("batch_id","id") WHERE outcome in ('failed', 'lease_expired');--> statement-breakpoint
CREATE INDEX "subagent_batches_unseen_idx" ON "subagent_batches" USING btree ("thread_id") WHERE unseen_settlement;