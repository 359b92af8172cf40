import re,sys
NR={0:'read',1:'write',20:'writev',44:'sendto',45:'recvfrom',46:'sendmsg',47:'recvmsg',426:'io_uring_enter',202:'futex',232:'epoll_wait',7:'poll',9:'mmap',11:'munmap',28:'madvise',25:'mremap',285:'fallocate',75:'fdatasync'}
pat=re.compile(r'^\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+([\d.]+): (\w+): (.*)$')
who=sys.argv[2]; start=float(sys.argv[3]); span=float(sys.argv[4])
T0=None; enter={}; sub={}; out=[]
for line in open(sys.argv[1]):
    m=pat.match(line)
    if not m: continue
    comm,pid,cpu,t,name,rest=m.groups(); t=float(t)
    if T0 is None: T0=t
    rel=(t-T0)*1e3
    if name=='sys_enter' and comm==who:
        nr=int(re.match(r'NR (\d+)',rest).group(1)); enter[pid]=(rel,nr)
    elif name=='sys_exit' and comm==who and pid in enter:
        r0,nr=enter.pop(pid); res=rest.split('= ')[-1]
        if (r1:=rel)-r0>0.05 or nr not in (426,):
            out.append((r0,'cpu%s %s = %s (%.3f ms)'%(cpu,NR.get(nr,nr),res,rel-r0)))
    elif name=='sched_switch':
        if 'prev_comm=%s '%who in rest: out.append((rel,'cpu%s  -- off (%s) -> %s'%(cpu,re.search(r'prev_state=(\S+)',rest).group(1),re.search(r'next_comm=(.*?) next_pid',rest).group(1))))
        if 'next_comm=%s '%who in rest: out.append((rel,'cpu%s  ++ on'%cpu))
    elif name=='sched_wakeup' and 'comm=%s '%who in rest:
        out.append((rel,'  wake by %s'%comm))
    elif name=='io_uring_submit_req':
        req=re.search(r'req (\S+),',rest).group(1); op=re.search(r'opcode (\w+)',rest).group(1); sub[req]=(rel,op,comm)
        if comm==who and op in('WRITE_FIXED','FALLOCATE'): out.append((rel,'  submit %s'%op))
    elif name=='io_uring_complete':
        req=re.search(r'req (\S+),',rest).group(1); res=int(re.search(r'result (-?\d+)',rest).group(1))
        if req in sub and sub[req][2]==who and sub[req][1] in ('WRITE_FIXED','FALLOCATE'):
            out.append((rel,'  done %s %d (%.2f ms)'%(sub[req][1],res,rel-sub[req][0])))
for t,s in sorted(out):
    if start<=t<=start+span: print('%9.3f %s'%(t,s))
