#!/usr/bin/env bash
# Placeholder replaced below.
exit 77
