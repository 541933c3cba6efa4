ALTER TABLE "tool_approvals" ADD COLUMN "kind" text DEFAULT 'batch_item' NOT NULL;--> statement-breakpoint
ALTER TABLE "tool_approvals" ADD COLUMN "thread_id" uuid;--> statement-breakpoint
ALTER TABLE "tool_approvals" ADD COLUMN "input_hash" text;--> statement-breakpoint
ALTER TABLE "tool_approvals" ADD COLUMN "expires_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "tool_approvals" ADD COLUMN "continued_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "tool_approvals" ADD CONSTRAINT "tool_approvals_thread_id_threads_id_fk" FOREIGN KEY ("thread_id") REFERENCES "public"."threads"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "tool_approvals_thread_idx" ON "tool_approvals" USING btree ("thread_id","created_at") WHERE thread_id is not null;--> statement-breakpoint
CREATE UNIQUE INDEX "tool_approvals_chat_call_uq" ON "tool_approvals" USING btree ("run_id","tool_call_id") WHERE kind <> 'batch_item';--> statement-breakpoint
CREATE INDEX "tool_approvals_lead_open_idx" ON "tool_approvals" USING btree ("thread_id") WHERE kind = 'lead' and continued_at is null;