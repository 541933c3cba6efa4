-- Issue 46: a comparison's page (the pairs API and compare.csv) looks up the other batch's items by
-- key instead of hashing all of them, so a page costs the same whatever that batch's size (at
-- 100,000 x 100,000 items a compare.csv was ~17 minutes of database work, one hash of b per 200
-- rows). Not unique (the submission checks keys). Its price is on every item write: measured on a
-- loaded machine at 10-40% of a bare 100,000-row INSERT of items (drizzle/0010 dropped the unique
-- one at ~15% of a whole submission).
CREATE INDEX "subagent_batch_items_key_idx" ON "subagent_batch_items" USING btree ("batch_id","item_key");
