-- Claim tokens come from the catalog (issue 16): every claim, by any process sharing this file,
-- takes its tokens from this one counter inside the claim's transaction, so no token is handed
-- out twice and a late completion from a node whose runs were taken back can never carry the
-- token of a run's new claim. Before, each process counted from its start time (ms << 10), and
-- two processes started a few milliseconds apart counted through the same numbers.
INSERT INTO catalog_meta (key, value)
SELECT 'claim_token', coalesce(max(claim_token), 0) FROM job_run;
