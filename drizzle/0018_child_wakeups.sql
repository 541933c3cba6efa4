CREATE TABLE "child_wakeups" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"thread_id" uuid NOT NULL,
	"user_id" uuid NOT NULL,
	"lead_run_id" uuid NOT NULL,
	"tool_call_id" text NOT NULL,
	"tool" text NOT NULL,
	"run_ids" uuid[] NOT NULL,
	"owner_instance" text NOT NULL,
	"settled_at" timestamp with time zone,
	"interrupted" boolean DEFAULT false NOT NULL,
	"result" jsonb,
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
ALTER TABLE "child_wakeups" ADD CONSTRAINT "child_wakeups_thread_id_threads_id_fk" FOREIGN KEY ("thread_id") REFERENCES "public"."threads"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "child_wakeups" ADD CONSTRAINT "child_wakeups_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "child_wakeups" ADD CONSTRAINT "child_wakeups_lead_run_id_agent_runs_id_fk" FOREIGN KEY ("lead_run_id") REFERENCES "public"."agent_runs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "child_wakeups_call_uq" ON "child_wakeups" USING btree ("lead_run_id","tool_call_id");--> statement-breakpoint
CREATE INDEX "child_wakeups_pending_idx" ON "child_wakeups" USING btree ("next_attempt_at") WHERE done_at is null;--> statement-breakpoint
CREATE INDEX "child_wakeups_thread_idx" ON "child_wakeups" USING btree ("thread_id") WHERE done_at is null;