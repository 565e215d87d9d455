"""Home timelines: the read path (`reader`: pages through the cursor), a read as a plan its
executors run (`plan`), what one read fetches (`fetch`), the page walked from it (`view`,
`entries`), celebrities' posts merged at read time (`celebrity_posts`), and the event loop's
reads from memcached alone (`warm_reads`) with the pages they keep (`page_memo`)."""
