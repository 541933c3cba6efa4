CREATE TABLE "tool_approvals" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"user_id" uuid NOT NULL,
	"batch_id" uuid,
	"item_id" uuid,
	"run_id" uuid NOT NULL,
	"approval_id" text NOT NULL,
	"tool_call_id" text NOT NULL,
	"tool_name" text NOT NULL,
	"input" jsonb,
	"status" text DEFAULT 'pending' NOT NULL,
	"reason" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"decided_at" timestamp with time zone
);
--> statement-breakpoint
ALTER TABLE "subagent_batches" ADD COLUMN "awaiting_approval_count" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "tool_approvals" ADD CONSTRAINT "tool_approvals_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "tool_approvals" ADD CONSTRAINT "tool_approvals_batch_id_subagent_batches_id_fk" FOREIGN KEY ("batch_id") REFERENCES "public"."subagent_batches"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "tool_approvals_item_idx" ON "tool_approvals" USING btree ("item_id");--> statement-breakpoint
CREATE INDEX "tool_approvals_batch_pending_idx" ON "tool_approvals" USING btree ("batch_id","tool_name") WHERE status = 'pending';--> statement-breakpoint
CREATE INDEX "tool_approvals_pending_idx" ON "tool_approvals" USING btree ("created_at") WHERE status = 'pending';