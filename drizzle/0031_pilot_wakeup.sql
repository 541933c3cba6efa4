-- A lead-submitted batch that pauses after its pilot (pause_reason 'pilot') wakes the lead once,
-- with what the pilot did (server/chat/wakeup.ts): a batch_wakeups row with settled_status
-- 'paused' under the settlement_seq it paused at (a pause is no settlement, so that seq is not
-- bumped, and the batch's next settlement takes the next one). A second pilot pause at the same
-- seq (a person's pause during the pilot, then resume) finds the row and wakes nobody again.
CREATE OR REPLACE FUNCTION flotilla_batch_pilot_wakeup() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO batch_wakeups (batch_id, thread_id, user_id, settlement_seq, settled_status)
    VALUES (NEW.id, NEW.thread_id, NEW.user_id, NEW.settlement_seq, 'paused')
    ON CONFLICT (batch_id, settlement_seq) DO NOTHING;
  RETURN NULL;
END
$$;--> statement-breakpoint
DROP TRIGGER IF EXISTS subagent_batches_pilot_wakeup ON subagent_batches;--> statement-breakpoint
CREATE TRIGGER subagent_batches_pilot_wakeup
  AFTER UPDATE ON subagent_batches
  FOR EACH ROW WHEN (NEW.wake_lead AND NEW.pause_reason = 'pilot' AND OLD.pause_reason IS DISTINCT FROM 'pilot')
  EXECUTE FUNCTION flotilla_batch_pilot_wakeup();
