-- Run once by the mysql:8 image when its (throwaway) data directory is
-- created. The image creates txmsg@'%' with rights on txmsg_test only; the
-- tests, the demo, txbench and txchaos create databases named txmsg_*.
-- '%' is needed here: connections through the published port reach the
-- container from the Docker bridge, not from its loopback.
GRANT ALL PRIVILEGES ON `txmsg\_%`.* TO 'txmsg'@'%';
