ALTER TABLE "subagent_batches" ADD COLUMN "reopened_at" timestamp with time zone;--> statement-breakpoint
CREATE INDEX "batch_wakeups_user_done_idx" ON "batch_wakeups" USING btree ("user_id","done_at");--> statement-breakpoint
CREATE INDEX "child_wakeups_user_done_idx" ON "child_wakeups" USING btree ("user_id","done_at");