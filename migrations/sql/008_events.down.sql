DROP TABLE events;
DROP FUNCTION events_notify();
